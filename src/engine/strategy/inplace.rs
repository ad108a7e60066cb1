//! The in-place strategy: under the exclusive lease, run the direct chunks
//! through the executor (O_DIRECT, same bytes), then rewrite unaligned
//! pieces exactly through the page cache. Timestamps, sync and the layout
//! check are the driver's.

use crate::engine::report::FailKind;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

use crate::engine::exec::{self, ExecParams};
use crate::engine::pacing::throttle::Throttle;
use crate::engine::report::{Outcome, Range, ReadError, SkipReason};
use crate::engine::safety::attrwatch::{AttrWatch, Seen};
use crate::engine::safety::journal::{self, Entry, Record};
use crate::engine::safety::lease::LeaseClock;
use crate::engine::safety::plan::{self, Chunk, PlanParams};
use crate::engine::safety::watch::{StopReason, Watch};
use crate::engine::strategy::{Done, FileJob};
use crate::io::fileio::FileIo;
use crate::io::syscalls::{read_exact_at, write_all_at};

/// The executor's watch on a real file: cancel, the lease, free space,
/// and the times its own writes leave (for the recovery record).
struct FileWatch<'a, 'fd> {
    fd: BorrowedFd<'a>,
    clock: &'a mut LeaseClock<'fd>,
    /// The crash-recovery record, when there is a journal.
    record: Option<&'a mut Record>,
    /// Other processes' attribute changes, and refreshd's own times.
    attrs: &'a mut AttrWatch<'fd>,
    cancel: &'a AtomicBool,
    /// Watermark, when free space must be checked.
    watermark: Option<u64>,
}

impl Watch for FileWatch<'_, '_> {
    fn should_stop(&mut self) -> Option<StopReason> {
        if self.cancel.load(Ordering::Relaxed) {
            return Some(StopReason::Cancelled);
        }
        if !self.clock.check() {
            if let Some(r) = self.record.as_deref_mut() {
                if let Err(e) = r.lease_broken() {
                    tracing::warn!("recording the lease break: {e}");
                }
            }
            return Some(StopReason::LeaseBroken);
        }
        None
    }

    /// No write of ours in flight: the file's times are ours unless
    /// another process changed its attributes; the record keeps ours, or
    /// says (synced) that it can no longer vouch for them.
    fn quiescent(&mut self) {
        let seen = self.attrs.look(self.fd);
        let Some(r) = self.record.as_deref_mut() else {
            return;
        };
        let done = match seen {
            Ok(Seen::Own(m, c)) => r.observe(m, c),
            Ok(Seen::Another) => r.changed_by_another(),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            tracing::warn!("updating the recovery record: {e}");
        }
    }

    fn space_for(&mut self, len: u64) -> Result<(), StopReason> {
        let Some(watermark) = self.watermark else {
            return Ok(());
        };
        let free = free_bytes(self.fd).unwrap_or(0);
        if free < watermark.saturating_add(len) {
            return Err(StopReason::LowSpace { free, watermark });
        }
        Ok(())
    }

    fn writing(&mut self) {
        self.attrs.writing(self.fd);
    }

    fn lease_deadline(&self) -> Option<Instant> {
        self.clock.deadline()
    }
}

fn free_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

fn fs_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_blocks.saturating_mul(s.f_frsize))
}

/// Plans and rewrites the file in place.
pub(crate) fn run(fio: &mut FileIo<'_>, job: &mut FileJob<'_, '_>) -> Done {
    let o = job.opened;
    let cfg = job.cfg;
    let fd = o.fd.as_fd();
    let sw = cfg.unsafe_switches;
    let align = match o.meta.dio_offset_align {
        Some(0) => {
            return Done::new(
                Outcome::Skipped {
                    reason: SkipReason::NoDirectIo,
                    detail: "the filesystem reports no direct I/O for this file".into(),
                },
                false,
            )
        }
        Some(a) => u64::from(a),
        // Older kernels: the page size is a safe alignment for any device.
        None => 4096,
    };
    if !align.is_power_of_two() || align > cfg.chunk {
        let reason = format!("unusable direct-I/O alignment {align}");
        return Done::new(Outcome::failed(FailKind::Io, reason), false);
    }
    let chunk =
        crate::engine::pacing::throttle::chunk_for_rate(cfg.chunk, job.throttle.rate(), align);
    let params = PlanParams {
        size: o.meta.size,
        align,
        chunk,
        rewrite_shared: cfg.rewrite_shared,
        unsafe_write_holes: sw.write_holes(),
        unsafe_direct_tail: sw.direct_tail(),
    };
    let p = match plan::for_file(fd, &params) {
        Ok(p) => p,
        Err(e) => return Done::new(Outcome::failed(FailKind::Io, e.to_string()), false),
    };
    // FIEMAP may have read extent blocks: not an application's reads.
    job.throttle.uncounted_io();
    job.report.excluded = p.excluded;
    job.report.bytes_planned = p.bytes();
    if p.chunks.is_empty() {
        return Done::new(plan::nothing_planned(&p, o.meta.size), false);
    }
    if cfg.dry_run {
        return Done::new(Outcome::WouldRefresh, false);
    }
    let watermark = if (o.fs.is_cow() || cfg.rewrite_shared) && !sw.no_space_check() {
        Some(
            cfg.min_free
                .map_or_else(|| fs_bytes(fd).unwrap_or(0) / 20, |b| b.0),
        )
    } else {
        None
    };
    let lease_break = job.clock.leased().then(|| job.clock.break_time());
    if job.clock.leased() {
        if let Some(j) = &cfg.journal {
            match begin_record(j, fd) {
                Ok(r) => *job.record = Some(r),
                Err(e) => {
                    let reason =
                        format!("writing the recovery journal in {}: {e}", j.dir().display());
                    return Done::new(Outcome::failed(FailKind::Journal, reason), false);
                }
            }
        }
    }
    let Some(attrs) = job.attrs.as_mut() else {
        let reason = "no watch for other processes' attribute changes (inotify): nothing written";
        return Done::new(Outcome::failed(FailKind::Io, reason), false);
    };
    let mut watch = FileWatch {
        fd,
        clock: &mut *job.clock,
        record: job.record.as_mut(),
        attrs,
        cancel: &cfg.cancel,
        watermark,
    };
    // Refuse up front when even the first chunk would cross the watermark.
    if let Err(why) = watch.space_for(p.chunks[0].len) {
        let detail = why.to_string();
        return Done::new(
            Outcome::Skipped {
                reason: SkipReason::LowSpace,
                detail,
            },
            false,
        );
    }

    let mut direct: Vec<Chunk> = p.chunks.iter().copied().filter(|c| c.direct).collect();
    let mut buffered: Vec<Chunk> = p.chunks.iter().copied().filter(|c| !c.direct).collect();
    // Resuming: skip what an earlier run finished, in execution order.
    let mut skip = job.skip;
    plan::skip_done(&mut direct, &mut skip);
    plan::skip_done(&mut buffered, &mut skip);
    let xp = ExecParams {
        depth: cfg.depth,
        align,
        verify: cfg.verify,
        lease_break,
        unsafe_write_failed_reads: sw.write_failed_reads(),
        unsafe_unbounded_writes: sw.unbounded_writes(),
    };
    let r = exec::run_direct(fio, &direct, job.throttle, &mut watch, xp, job.progress);
    let report = &mut *job.report;
    report.bytes_refreshed = r.written;
    report.lease_exposed = crate::engine::report::ranges(&r.exposed);
    report.read_errors = r
        .bad_ranges
        .iter()
        .map(|(range, kind, errno)| ReadError {
            offset: range.start,
            len: range.end - range.start,
            error: errno.map_or_else(
                || format!("{kind:?}"),
                |e| io::Error::from_raw_os_error(e).to_string(),
            ),
        })
        .collect();
    let mut stop = r.stop;
    let mut resume = r.resume_offset;
    let mut failure = r.error.map(|e| {
        let kind = match e {
            crate::engine::exec::ExecError::Verify { .. } => FailKind::Verify,
            _ => FailKind::Io,
        };
        (kind, e.to_string())
    });

    if stop.is_none() && failure.is_none() && !buffered.is_empty() {
        let mut b = Buffered {
            fd,
            throttle: &mut *job.throttle,
            watch: &mut watch,
            verify: cfg.verify,
            progress: &mut *job.progress,
            exposed: &mut report.lease_exposed,
        };
        match b.rewrite(&buffered) {
            Ok(BufferedResult { written, bad }) => {
                report.bytes_refreshed += written;
                report.read_errors.extend(bad);
            }
            Err(BufferedError::Stop(why, offset)) => {
                stop = Some(why);
                resume = Some(offset);
            }
            Err(BufferedError::Io(e)) => failure = Some((FailKind::Io, e)),
        }
    }
    // Every write reaped: the times the last one left, for the record and
    // for the driver's decision to put the originals back.
    watch.quiescent();
    #[cfg(test)]
    crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::Written);
    let outcome = if let Some((kind, reason)) = failure {
        Outcome::Failed { kind, reason }
    } else if let Some(why) = stop {
        Outcome::interrupted(resume.unwrap_or(0), why.cause(), why.to_string())
    } else {
        report.done_outcome()
    };
    Done::new(outcome, true)
}

/// Opens the file's crash-recovery record under the lease, before the
/// first write: who it is, its times now, where it is.
fn begin_record(j: &journal::Journal, fd: BorrowedFd<'_>) -> io::Result<Record> {
    let taken = journal::observe(fd)?;
    let path = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))?;
    j.begin(Entry {
        version: journal::VERSION,
        path,
        taken,
        left_mtime: taken.mtime,
        left_ctime: taken.ctime,
        lease_broken: false,
        changed_by_another: false,
    })
}

struct BufferedResult {
    written: u64,
    bad: Vec<ReadError>,
}

enum BufferedError {
    Stop(StopReason, u64),
    Io(String),
}

/// Unaligned pieces (heads, and the tail up to EOF) go through the page
/// cache so exactly those bytes are written: the file never grows.
struct Buffered<'a> {
    fd: BorrowedFd<'a>,
    throttle: &'a mut Throttle,
    watch: &'a mut dyn Watch,
    verify: bool,
    progress: &'a mut dyn FnMut(u64),
    exposed: &'a mut Vec<Range>,
}

impl Buffered<'_> {
    fn rewrite(&mut self, pieces: &[Chunk]) -> Result<BufferedResult, BufferedError> {
        let flags = fcntl_getfl(self.fd).map_err(|e| io_err("fcntl", e))?;
        fcntl_setfl(self.fd, flags - OFlags::DIRECT).map_err(|e| io_err("clearing O_DIRECT", e))?;
        let result = self.pieces(pieces);
        let restore = fcntl_setfl(self.fd, flags);
        let out = result?;
        restore.map_err(|e| io_err("restoring O_DIRECT", e))?;
        Ok(out)
    }

    fn pieces(&mut self, pieces: &[Chunk]) -> Result<BufferedResult, BufferedError> {
        let fd = self.fd;
        let mut out = BufferedResult {
            written: 0,
            bad: vec![],
        };
        let mut saved: Vec<(Chunk, Vec<u8>)> = Vec::new();
        for c in pieces {
            if let Some(why) = self.watch.should_stop() {
                return Err(BufferedError::Stop(why, c.offset));
            }
            self.watch
                .space_for(c.len)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            let mut buf = vec![0u8; c.len as usize];
            if let Err(e) = read_exact_at(fd, &mut buf, c.offset) {
                out.bad.push(ReadError {
                    offset: c.offset,
                    len: c.len,
                    error: e.to_string(),
                });
                continue;
            }
            self.throttle
                .take_watching(c.len, self.watch)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            self.watch.writing();
            let written = write_all_at(fd, &buf, c.offset);
            self.watch.quiescent();
            if self
                .watch
                .lease_deadline()
                .is_some_and(|d| Instant::now() > d)
            {
                self.exposed.push(Range {
                    offset: c.offset,
                    len: c.len,
                });
            }
            written.map_err(|e| {
                BufferedError::Io(format!(
                    "writing {} bytes at offset {}: {e}",
                    c.len, c.offset
                ))
            })?;
            out.written += c.len;
            (self.progress)(c.len);
            if self.verify {
                saved.push((*c, buf));
            }
        }
        rustix::fs::fdatasync(fd).map_err(|e| io_err("fdatasync", e))?;
        for c in pieces {
            // Leave no cached pages behind (they are clean now).
            let _ = rustix::fs::fadvise(
                fd,
                c.offset,
                std::num::NonZeroU64::new(c.len),
                rustix::fs::Advice::DontNeed,
            );
        }
        for (c, want) in saved {
            let mut got = vec![0u8; c.len as usize];
            read_exact_at(fd, &mut got, c.offset).map_err(|e| {
                BufferedError::Io(format!("verify read at offset {}: {e}", c.offset))
            })?;
            if got != want {
                return Err(BufferedError::Io(format!(
                    "verify: {} bytes at offset {} read back differently",
                    c.len, c.offset
                )));
            }
        }
        Ok(out)
    }
}

fn io_err(op: &str, e: rustix::io::Errno) -> BufferedError {
    BufferedError::Io(format!("{op}: {}", io::Error::from(e)))
}
