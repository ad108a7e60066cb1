//! The emulated disk: one FUSE file, `disk.img`, backed by a sparse memfd.
//! Every 4 KiB block remembers when (in virtual months) it was last
//! written; reads are delayed by the model for the blocks' ages, served by
//! at most `channels` requests at once (like flash dies). Faulty ranges
//! fail reads with EIO, and any write into them is logged.

mod channels;
mod fuse;
mod state;
mod stats;

pub use fuse::AgingDisk;
pub use state::{DiskState, BLOCK, IMAGE_NAME};
pub use stats::Stats;

#[cfg(test)]
mod tests;
