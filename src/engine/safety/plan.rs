//! Which byte ranges of a file get rewritten, cut into chunks.
//!
//! Only bytes that are both data for `SEEK_DATA`/`SEEK_HOLE` and in a plain
//! written extent for FIEMAP are planned: holes, unwritten, delayed, inline,
//! encoded and (by default) shared extents are never written. Aligned middles
//! go through O_DIRECT; unaligned heads and tails (the last bytes before EOF)
//! are rewritten through the page cache, exactly, so the file never grows.

use std::io;
use std::ops::Range;
use std::os::fd::BorrowedFd;

use crate::engine::report::Excluded;
use crate::io::syscalls::{self, Extent};

/// One unit of I/O: read these bytes, write the same bytes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub offset: u64,
    pub len: u64,
    /// O_DIRECT (aligned) or through the page cache (unaligned piece).
    pub direct: bool,
}

impl Chunk {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// How to plan one file.
#[derive(Debug, Clone, Copy)]
pub struct PlanParams {
    pub size: u64,
    /// Direct-I/O offset and length alignment (a power of two).
    pub align: u64,
    /// Largest direct chunk (a multiple of `align`).
    pub chunk: u64,
    /// Rewrite shared extents too (unshares them: costs space).
    pub rewrite_shared: bool,
    /// Test-only: ignore holes and extent flags, plan `[0, size)` whole.
    pub unsafe_write_holes: bool,
    /// Test-only: write the tail as a full aligned direct block (grows the file).
    pub unsafe_direct_tail: bool,
}

/// The plan for one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub chunks: Vec<Chunk>,
    pub excluded: Excluded,
}

impl Plan {
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }
}

/// Drops whole chunks from the front while they fit in `skip` (bytes
/// already done by an earlier, interrupted run); a chunk only partly done
/// is done again (the same bytes: harmless).
pub fn skip_done(chunks: &mut Vec<Chunk>, skip: &mut u64) {
    let n = chunks
        .iter()
        .scan(0u64, |acc, c| {
            *acc += c.len;
            Some(*acc)
        })
        .take_while(|&acc| acc <= *skip)
        .count();
    let done: u64 = chunks[..n].iter().map(|c| c.len).sum();
    chunks.drain(..n);
    *skip -= done;
    if !chunks.is_empty() {
        *skip = 0;
    }
}

/// The two views of a file's data that [`plan`] intersects, or why they
/// could not be had (as a failure to report).
pub fn data_layout(
    fd: BorrowedFd<'_>,
    size: u64,
) -> Result<(Vec<Range<u64>>, Vec<Extent>), LayoutError> {
    let seek = seek_data_ranges(fd, size).map_err(|source| LayoutError {
        call: "SEEK_DATA/SEEK_HOLE",
        source,
    })?;
    let extents = syscalls::fiemap(fd).map_err(|source| LayoutError {
        call: "FIEMAP",
        source,
    })?;
    Ok((seek, extents))
}

/// The file's layout could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {source}")]
pub struct LayoutError {
    pub call: &'static str,
    #[source]
    pub source: io::Error,
}

/// The plan for an open file (its layout read now), or why not.
pub fn for_file(fd: BorrowedFd<'_>, params: &PlanParams) -> Result<Plan, LayoutError> {
    let (seek, extents) = data_layout(fd, params.size)?;
    Ok(plan(params, &seek, &extents))
}

/// Whether `range` of the file is still all plain data: no hole, no
/// unwritten extent (someone may have punched or zeroed it since the plan).
pub fn still_plain_data(fd: BorrowedFd<'_>, range: Range<u64>) -> io::Result<bool> {
    let data = seek_data_ranges(fd, range.end)?;
    let covered = data
        .iter()
        .any(|d| d.start <= range.start && range.end <= d.end);
    if !covered {
        return Ok(false);
    }
    let unplain = syscalls::FIEMAP_EXTENT_UNWRITTEN
        | syscalls::FIEMAP_EXTENT_DELALLOC
        | syscalls::FIEMAP_EXTENT_UNKNOWN;
    Ok(!syscalls::fiemap(fd)?.iter().any(|e| {
        e.logical < range.end && range.start < e.logical + e.length && e.flags & unplain != 0
    }))
}

/// Why an empty plan leaves the file alone.
pub fn nothing_planned(p: &Plan, size: u64) -> crate::engine::report::Outcome {
    use crate::engine::report::{Outcome, SkipReason};
    let e = p.excluded;
    let detail = if size == 0 {
        "empty file".to_string()
    } else if e.shared > 0 && e.total() == e.shared {
        return Outcome::Skipped {
            reason: SkipReason::Shared,
            detail: "all data is in shared (reflinked or snapshotted) extents".into(),
        };
    } else if e.total() == 0 {
        "only holes".to_string()
    } else {
        let mut kinds = vec![];
        for (n, what) in [
            (e.unwritten, "preallocated but unwritten"),
            (e.inline, "inline in metadata"),
            (e.encoded, "compressed"),
            (e.shared, "shared"),
            (e.delalloc, "not yet allocated"),
        ] {
            if n > 0 {
                kinds.push(what);
            }
        }
        format!("all data is {}", kinds.join(" or "))
    };
    Outcome::Skipped {
        reason: SkipReason::NoData,
        detail,
    }
}

/// Data ranges per `SEEK_DATA`/`SEEK_HOLE`, clamped to `size`.
pub fn seek_data_ranges(fd: BorrowedFd<'_>, size: u64) -> io::Result<Vec<Range<u64>>> {
    use rustix::fs::{seek, SeekFrom};
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match seek(fd, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        if start >= size {
            break;
        }
        let end = seek(fd, SeekFrom::Hole(start))?.min(size);
        if end <= start {
            break;
        }
        out.push(start..end);
        pos = end;
    }
    Ok(out)
}

/// Builds the plan from the two views of the file's layout.
pub fn plan(params: &PlanParams, seek_data: &[Range<u64>], extents: &[Extent]) -> Plan {
    assert!(
        params.align.is_power_of_two(),
        "alignment must be a power of two"
    );
    assert!(
        params.chunk >= params.align && params.chunk % params.align == 0,
        "chunk must be a multiple of the alignment"
    );
    let size = params.size;
    let mut excluded = Excluded::default();
    let data: Vec<Range<u64>> = if params.unsafe_write_holes {
        std::iter::once(0..size).filter(|r| !r.is_empty()).collect()
    } else {
        let allowed = extents
            .iter()
            .filter_map(|e| writable(e, params, &mut excluded))
            .collect();
        intersect(&normalize(seek_data.to_vec()), &normalize(allowed))
    };
    let mut chunks = Vec::new();
    for r in data {
        let e = if params.unsafe_direct_tail && r.end == size {
            round_up(r.end, params.align)
        } else {
            r.end
        };
        split_range(r.start..e, params, &mut chunks);
    }
    Plan { chunks, excluded }
}

/// The part of an extent within the size that may be rewritten; what
/// may not (unwritten, delayed, inline, encoded, shared) is counted in
/// `excluded` instead.
fn writable(e: &Extent, params: &PlanParams, excluded: &mut Excluded) -> Option<Range<u64>> {
    let size = params.size;
    let r = e.logical.min(size)..e.logical.saturating_add(e.length).min(size);
    if r.is_empty() {
        return None;
    }
    let len = r.end - r.start;
    let f = e.flags;
    let counter = if f & syscalls::FIEMAP_EXTENT_UNWRITTEN != 0 {
        &mut excluded.unwritten
    } else if f & (syscalls::FIEMAP_EXTENT_DELALLOC | syscalls::FIEMAP_EXTENT_UNKNOWN) != 0 {
        &mut excluded.delalloc
    } else if f
        & (syscalls::FIEMAP_EXTENT_DATA_INLINE
            | syscalls::FIEMAP_EXTENT_NOT_ALIGNED
            | syscalls::FIEMAP_EXTENT_DATA_TAIL)
        != 0
    {
        &mut excluded.inline
    } else if f & syscalls::FIEMAP_EXTENT_ENCODED != 0 {
        &mut excluded.encoded
    } else if f & syscalls::FIEMAP_EXTENT_SHARED != 0 && !params.rewrite_shared {
        &mut excluded.shared
    } else {
        return Some(r);
    };
    *counter += len;
    None
}

/// Splits one data range into chunks: an unaligned head and tail
/// (buffered), and the aligned middle in `chunk`-aligned pieces (direct).
fn split_range(r: Range<u64>, params: &PlanParams, chunks: &mut Vec<Chunk>) {
    let (s, e) = (r.start, r.end);
    let a = params.align;
    let head_end = round_up(s, a);
    let tail_start = round_down(e, a);
    let buffered = |offset: u64, end: u64| Chunk {
        offset,
        len: end - offset,
        direct: false,
    };
    if head_end >= tail_start {
        chunks.push(buffered(s, e));
        return;
    }
    if s < head_end {
        chunks.push(buffered(s, head_end));
    }
    let mut off = head_end;
    while off < tail_start {
        let next = ((off / params.chunk) + 1) * params.chunk;
        let end = next.min(tail_start);
        chunks.push(Chunk {
            offset: off,
            len: end - off,
            direct: true,
        });
        off = end;
    }
    if tail_start < e {
        chunks.push(buffered(tail_start, e));
    }
}

/// Sorts and merges overlapping or touching ranges; drops empty ones.
pub fn normalize(mut v: Vec<Range<u64>>) -> Vec<Range<u64>> {
    v.retain(|r| r.start < r.end);
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Intersection of two normalized range lists.
pub fn intersect(a: &[Range<u64>], b: &[Range<u64>]) -> Vec<Range<u64>> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let s = a[i].start.max(b[j].start);
        let e = a[i].end.min(b[j].end);
        if s < e {
            out.push(s..e);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

pub fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

pub fn round_down(x: u64, a: u64) -> u64 {
    x / a * a
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // lists of ranges that happen to hold one
mod tests;
