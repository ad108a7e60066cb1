//! An emulated aging SSD for refreshd's tests, benchmarks and demo: a
//! FUSE-backed disk image that models retention decay, under a loop device
//! with direct I/O, with a real filesystem on top. Everything above the
//! FUSE layer — filesystem, O_DIRECT, `/sys/block/loopN/stat` — is real.

pub mod cli;
pub mod control;
pub mod disk;
pub mod drive;
pub mod host;
pub mod measure;
pub mod model;
pub mod mutator;
pub mod scenarios;
pub mod seccomp;

pub use drive::{Drive, DriveOptions};
pub use model::Model;
