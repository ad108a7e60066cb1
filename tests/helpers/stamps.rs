//! Version-stamped files for lost-write tests: every 4 KiB block starts
//! with "v<version> block <i>", so a write another process made and
//! refreshd then lost is a block that still carries the old version.

use std::path::Path;

use super::pattern;

const BLOCK: usize = 4096;

/// `len` bytes of filler (from `seed`) with every block stamped `version`.
pub fn stamped(len: usize, seed: u64, version: u32) -> Vec<u8> {
    let mut out = pattern(len, seed + u64::from(version));
    for (i, block) in out.chunks_mut(BLOCK).enumerate() {
        let stamp = format!("v{version} block {i:08}");
        block[..stamp.len()].copy_from_slice(stamp.as_bytes());
    }
    out
}

/// How many blocks of `file` differ from `want`.
pub fn lost(file: &Path, want: &[u8]) -> usize {
    let now = std::fs::read(file).unwrap();
    now.chunks(BLOCK)
        .zip(want.chunks(BLOCK))
        .filter(|(a, b)| a != b)
        .count()
}
