//! What one engine is started with.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::engine::pacing::pace::PaceStatus;
use crate::engine::safety::journal::Journal;
pub use crate::engine::types::PaceSettings;
use crate::engine::types::{
    Strategy, UnsafeSwitches, DEFAULT_CHUNK, DEFAULT_DEPTH, DEFAULT_RELOCATE_CHUNK,
};
use crate::io::backend::BackendChoice;
use crate::units::ByteSize;

/// How an engine refreshes files.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest chunk (a power of two ≥ 4096).
    pub chunk: u64,
    /// Chunks in flight.
    pub depth: usize,
    pub backend: BackendChoice,
    /// Read every written chunk back and compare.
    pub verify: bool,
    /// Check and plan only.
    pub dry_run: bool,
    /// Rewrite shared (reflinked, snapshotted) extents too.
    pub rewrite_shared: bool,
    /// Keep at least this much free space on copy-on-write filesystems
    /// (default: 5 % of the filesystem).
    pub min_free: Option<ByteSize>,
    /// Set to stop after in-flight I/O (Ctrl-C, shutdown).
    pub cancel: Arc<AtomicBool>,
    /// In place, relocation, or in place with relocation for files in use.
    pub strategy: Strategy,
    /// Largest relocation unit.
    pub relocate_chunk: u64,
    /// Where in-place refreshes record what to put back after a crash
    /// (see `safety::journal`); `None`: a killed run leaves the mtime
    /// of the file it was writing moved.
    pub journal: Option<Arc<Journal>>,
    /// The rate, yielding to other I/O on the drive, request priorities.
    pub pace: PaceSettings,
    /// Whether and why the engine is yielding now (read by the daemon).
    pub pace_status: Arc<PaceStatus>,
    #[doc(hidden)]
    pub unsafe_switches: UnsafeSwitches,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            chunk: DEFAULT_CHUNK,
            depth: DEFAULT_DEPTH,
            backend: BackendChoice::Auto,
            verify: false,
            dry_run: false,
            rewrite_shared: false,
            min_free: None,
            cancel: Arc::new(AtomicBool::new(false)),
            strategy: Strategy::Auto,
            relocate_chunk: DEFAULT_RELOCATE_CHUNK,
            journal: None,
            pace: PaceSettings::default(),
            pace_status: Arc::default(),
            unsafe_switches: Default::default(),
        }
    }
}

/// Error starting an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Backend(#[source] crate::io::IoError),
    #[error("invalid engine settings: {0}")]
    Config(String),
    #[error("starting the I/O thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Progress callback: bytes just refreshed.
pub type Progress = Box<dyn FnMut(u64) + Send>;
