//! The two ways the engine moves bytes: an io_uring ring with registered
//! buffers and several requests in flight, or plain pread/pwrite (one at a
//! time) where io_uring is not allowed. Both own the buffer pool.
//!
//! Nothing outside this module and [`super::fileio`] submits requests: the
//! raw [`IoBackend::submit`] is `unsafe` (its fd must outlive the request),
//! and [`super::fileio::FileIo`] is the safe way in. Every request carries
//! the epoch of the file handle it was submitted for, so a completion can
//! never be taken for another file's request.

use serde::Serialize;

use super::buffers::BufferPool;
use super::error::IoError;

mod sync;
mod types;
mod uring;
pub use sync::SyncBackend;
pub use types::{BackendKind, Completion, IoBackend, Op, Request};
pub use uring::UringBackend;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BackendChoice {
    /// io_uring, falling back to pread/pwrite when the kernel refuses it.
    #[default]
    Auto,
    /// io_uring or fail.
    IoUring,
    /// pread/pwrite only.
    Sync,
}

/// Builds the backend; the second value is why io_uring was not used.
pub fn open_backend(
    choice: BackendChoice,
    pool: BufferPool,
) -> Result<(Box<dyn IoBackend>, Option<String>), IoError> {
    match choice {
        BackendChoice::Sync => Ok((
            Box::new(SyncBackend::new(pool)),
            Some("pread/pwrite requested".to_string()),
        )),
        BackendChoice::IoUring => Ok((
            Box::new(UringBackend::new(pool).map_err(IoError::Setup)?),
            None,
        )),
        BackendChoice::Auto => {
            // Probe with a small ring first: the pool is moved into the real one.
            match io_uring::IoUring::new(2) {
                Ok(_) => Ok((
                    Box::new(UringBackend::new(pool).map_err(IoError::Setup)?),
                    None,
                )),
                Err(e) => Ok((
                    Box::new(SyncBackend::new(pool)),
                    Some(format!("io_uring unavailable ({e}); using pread/pwrite")),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests;
