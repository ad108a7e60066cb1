//! Version 1 records (times in i64 nanoseconds, identity by st_dev): read
//! so that a crash just before an upgrade is still recovered (the device
//! numbers hold until the next reboot).

use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Observed {
    pub dev: u64,
    pub ino: u64,
    pub btime_ns: Option<i64>,
    pub generation: Option<u32>,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

#[derive(Debug, Deserialize)]
pub struct Entry {
    pub path: std::path::PathBuf,
    pub taken: Observed,
    pub left_mtime_ns: i64,
    pub left_ctime_ns: i64,
    pub lease_broken: bool,
}
