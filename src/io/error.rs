//! What can go wrong in the I/O layer itself — the ring, not a request:
//! a request's own result (EIO, ENOSPC…) is in its completion.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("setting up io_uring: {0}")]
    Setup(#[source] io::Error),
    #[error("the I/O ring is broken (an earlier file's I/O could not be reaped)")]
    Poisoned,
    #[error("submitting a {op} of {len} bytes at offset {offset}: {source}")]
    Submit {
        /// "read" or "write".
        op: &'static str,
        offset: u64,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("waiting for completions: {0}")]
    Wait(#[source] io::Error),
    #[error("reaping the I/O in flight: {0}")]
    Drain(#[source] io::Error),
}

impl IoError {
    /// The kind of the underlying error (`Other` for a poisoned ring).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            IoError::Setup(e) | IoError::Wait(e) | IoError::Drain(e) => e.kind(),
            IoError::Submit { source, .. } => source.kind(),
            IoError::Poisoned => io::ErrorKind::Other,
        }
    }
}

/// For callers that report any I/O failure alike (the sampler): the kind
/// is kept, the context goes into the message.
impl From<IoError> for io::Error {
    fn from(e: IoError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}
