//! The I/O layer: everything that talks to the kernel about files and
//! devices, and nothing about refresh policy.
//!
//! - [`backend`]: io_uring (or plain syscalls) behind one trait, with
//!   registered buffers; [`fileio`]: the per-file handle that owns every
//!   request in flight; [`buffers`]: aligned memory for O_DIRECT;
//!   [`account`]: the completed requests, counted for whoever paces them;
//!   [`error`]: what fails in the layer itself ([`IoError`]).
//! - [`syscalls`]: the raw calls the standard library lacks (FIEMAP,
//!   leases, MOVE_EXT, FIDEDUPERANGE, ioprio, mincore, …).
//! - [`resolve`]: paths opened beneath a root without following links
//!   (openat2, or a checked component walk where it is refused);
//!   [`fsid`]: a filesystem's identity across reboots; [`refused`]: the
//!   calls a sandbox refused, counted.
//! - [`block_reads`]: others' reads of a drive timed one by one at the
//!   block layer (eBPF), for the pacer's view of the application's tail.

pub mod account;
pub mod backend;
pub mod block_reads;
pub mod buffers;
pub mod error;
pub mod fileio;
pub mod fsid;
pub mod refused;
pub mod resolve;
pub mod syscalls;
#[cfg(test)]
pub(crate) mod testdev;

pub use error::IoError;
