//! The emulated disk: one FUSE file, `disk.img`, backed by a sparse file.
//! Every 4 KiB block remembers when (in virtual months) it was last
//! written; reads are delayed by the model for the blocks' ages, served by
//! at most `channels` requests at once (like flash dies). Faulty ranges
//! fail reads with EIO, and any write into them is logged.

mod channels;
mod fuse;
mod state;

pub use fuse::AgingDisk;
pub use state::{DiskState, Stats, BLOCK, IMAGE_NAME};

#[cfg(test)]
mod tests;
