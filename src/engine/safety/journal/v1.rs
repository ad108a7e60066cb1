//! Version 1 records (times in i64 nanoseconds, identity by st_dev): read
//! so that a crash just before an upgrade is still recovered (the device
//! numbers hold until the next reboot).

use serde::Deserialize;

use crate::clock::Timestamp;
use crate::io::fsid::FsId;

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

impl From<Entry> for super::Entry {
    fn from(e: Entry) -> super::Entry {
        let t = e.taken;
        super::Entry {
            version: 1,
            path: e.path,
            taken: super::Observed {
                fs: FsId::Dev(t.dev),
                dev: t.dev,
                ino: t.ino,
                btime: t.btime_ns.map(Timestamp::from_nanos),
                generation: t.generation,
                atime: Timestamp::from_nanos(t.atime_ns),
                mtime: Timestamp::from_nanos(t.mtime_ns),
                ctime: Timestamp::from_nanos(t.ctime_ns),
            },
            left_mtime: Timestamp::from_nanos(e.left_mtime_ns),
            left_ctime: Timestamp::from_nanos(e.left_ctime_ns),
            lease_broken: e.lease_broken,
            changed_by_another: false,
        }
    }
}
