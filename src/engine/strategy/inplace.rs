//! The in-place strategy: under the exclusive lease, run the direct chunks
//! through the executor (O_DIRECT, same bytes), then rewrite unaligned
//! pieces exactly through the page cache. Timestamps, sync and the layout
//! check are the driver's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::engine::exec::{self, ExecParams};
use crate::engine::report::{FailKind, FileReport, Outcome, ReadError, SkipReason};
use crate::engine::safety::journal::{self, Entry, Record};
use crate::engine::safety::plan::{self, Chunk, Plan, PlanParams};
use crate::engine::safety::watch::{StopReason, Watch};
use crate::engine::strategy::{Done, FileJob};
use crate::io::fileio::FileIo;

mod buffered;
mod watch;

use buffered::{Buffered, BufferedError, BufferedResult};
use watch::{fs_bytes, FileWatch};

/// Plans and rewrites the file in place.
pub(crate) fn run(fio: &mut FileIo<'_>, job: &mut FileJob<'_, '_>) -> Done {
    match rewrite(fio, job) {
        Ok(done) | Err(done) => done,
    }
}

/// A file's end before any write: nothing was written.
fn unwritten(outcome: Outcome) -> Done {
    Done::new(outcome, false)
}

fn rewrite(fio: &mut FileIo<'_>, job: &mut FileJob<'_, '_>) -> Result<Done, Done> {
    let cfg = job.cfg;
    let sw = cfg.unsafe_switches;
    let fd = job.opened.fd.as_fd();
    let align = direct_alignment(job)?;
    let p = plan_file(job, align)?;
    let watermark = watermark(job);
    open_record(job)?;
    let lease_break = job.clock.leased().then(|| job.clock.break_time());
    let Some(attrs) = job.attrs.as_mut() else {
        let reason = "no watch for other processes' attribute changes (inotify): nothing written";
        return Err(unwritten(Outcome::failed(FailKind::Io, reason)));
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
        return Err(unwritten(Outcome::Skipped {
            reason: SkipReason::LowSpace,
            detail: why.to_string(),
        }));
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
    let mut end = Ended::of_direct(r, report);
    if end.clean() && !buffered.is_empty() {
        let mut b = Buffered {
            fd,
            throttle: &mut *job.throttle,
            watch: &mut watch,
            verify: cfg.verify,
            progress: &mut *job.progress,
            exposed: &mut report.lease_exposed,
        };
        end.after_buffered(b.rewrite(&buffered), report);
    }
    // Every write reaped: the times the last one left, for the record and
    // for the driver's decision to put the originals back. (A ring that
    // could not drain reported its writes exposed: no look at times that
    // may be half stored.)
    if let Some(proof) = fio.no_write_in_flight() {
        watch.quiescent(proof);
    }
    #[cfg(test)]
    crate::engine::test_hooks::at(fd, crate::engine::test_hooks::Point::Written);
    Ok(Done::new(end.outcome(report), true))
}

/// The direct-I/O alignment the file needs (a power of two, at most a
/// chunk), or why it cannot be rewritten.
fn direct_alignment(job: &FileJob<'_, '_>) -> Result<u64, Done> {
    let align = match job.opened.meta.dio_offset_align {
        Some(0) => {
            return Err(unwritten(Outcome::Skipped {
                reason: SkipReason::NoDirectIo,
                detail: "the filesystem reports no direct I/O for this file".into(),
            }))
        }
        Some(a) => u64::from(a),
        // Older kernels: the page size is a safe alignment for any device.
        None => 4096,
    };
    if !align.is_power_of_two() || align > job.cfg.chunk {
        let reason = format!("unusable direct-I/O alignment {align}");
        return Err(unwritten(Outcome::failed(FailKind::Io, reason)));
    }
    Ok(align)
}

/// The file's plan, recorded in the report; ends here when there is
/// nothing to write (or nothing may be written: a dry run).
fn plan_file(job: &mut FileJob<'_, '_>, align: u64) -> Result<Plan, Done> {
    let (o, cfg, sw) = (job.opened, job.cfg, job.cfg.unsafe_switches);
    let chunk = crate::engine::types::chunk_for_rate(cfg.chunk, job.throttle.rate(), align);
    let params = PlanParams {
        size: o.meta.size,
        align,
        chunk,
        rewrite_shared: cfg.rewrite_shared,
        unsafe_write_holes: sw.write_holes(),
        unsafe_direct_tail: sw.direct_tail(),
    };
    // FIEMAP may read extent blocks: not an application's reads.
    let p = job
        .throttle
        .uncounted(|| plan::for_file(o.fd.as_fd(), &params))
        .map_err(|e| unwritten(Outcome::failed(FailKind::Io, e.to_string())))?;
    job.report.excluded = p.excluded;
    job.report.bytes_planned = p.bytes();
    if p.chunks.is_empty() {
        return Err(unwritten(plan::nothing_planned(&p, o.meta.size)));
    }
    if cfg.dry_run {
        return Err(unwritten(Outcome::WouldRefresh));
    }
    Ok(p)
}

/// Free space that must remain (copy-on-write filesystems, or rewriting
/// shared extents): `min_free`, else 5 % of the filesystem.
fn watermark(job: &FileJob<'_, '_>) -> Option<u64> {
    let (o, cfg) = (job.opened, job.cfg);
    let needed = o.fs.is_cow() || cfg.rewrite_shared;
    (needed && !cfg.unsafe_switches.no_space_check()).then(|| {
        cfg.min_free
            .map_or_else(|| fs_bytes(o.fd.as_fd()).unwrap_or(0) / 20, |b| b.0)
    })
}

/// The crash-recovery record, before the first write (under a lease, with
/// a journal).
fn open_record(job: &mut FileJob<'_, '_>) -> Result<(), Done> {
    let (Some(j), true) = (&job.cfg.journal, job.clock.leased()) else {
        return Ok(());
    };
    // A cold journal directory is read: ours, not an application's.
    match job
        .throttle
        .uncounted(|| begin_record(j, job.opened.fd.as_fd()))
    {
        Ok(r) => {
            *job.record = Some(r);
            Ok(())
        }
        Err(e) => {
            let reason = format!("writing the recovery journal in {}: {e}", j.dir().display());
            Err(unwritten(Outcome::failed(FailKind::Journal, reason)))
        }
    }
}

/// How the writes ended: stopped (and where), failed, or done.
struct Ended {
    stop: Option<StopReason>,
    resume: Option<u64>,
    failure: Option<(FailKind, String)>,
}

impl Ended {
    /// The direct chunks' run, its counts recorded in the report.
    fn of_direct(r: exec::ExecResult, report: &mut FileReport) -> Ended {
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
        let failure = r.error.map(|e| {
            let kind = match e {
                crate::engine::exec::ExecError::Verify { .. } => FailKind::Verify,
                _ => FailKind::Io,
            };
            (kind, e.to_string())
        });
        Ended {
            stop: r.stop,
            resume: r.resume_offset,
            failure,
        }
    }

    fn clean(&self) -> bool {
        self.stop.is_none() && self.failure.is_none()
    }

    fn after_buffered(
        &mut self,
        r: Result<BufferedResult, BufferedError>,
        report: &mut FileReport,
    ) {
        match r {
            Ok(BufferedResult { written, bad }) => {
                report.bytes_refreshed += written;
                report.read_errors.extend(bad);
            }
            Err(BufferedError::Stop(why, offset)) => {
                self.stop = Some(why);
                self.resume = Some(offset);
            }
            Err(BufferedError::Io(e)) => self.failure = Some((FailKind::Io, e)),
        }
    }

    fn outcome(self, report: &FileReport) -> Outcome {
        if let Some((kind, reason)) = self.failure {
            Outcome::Failed { kind, reason }
        } else if let Some(why) = self.stop {
            Outcome::interrupted(self.resume.unwrap_or(0), why.cause(), why.to_string())
        } else {
            report.done_outcome()
        }
    }
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
        reads_moved_atime: crate::engine::safety::meta::reads_move_atime(fd),
    })
}

#[cfg(test)]
mod record_tests {
    #![allow(clippy::unwrap_used)]
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;

    /// The record says whether the run's reads could move the atime: its
    /// descriptor without `O_NOATIME` (as `reopen` falls back for a file
    /// neither owned nor covered by `CAP_FOWNER`), or with it.
    #[test]
    fn the_record_says_whether_our_reads_move_the_atime() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, [1u8; 4096]).unwrap();
        let j = super::journal::Journal::open(&tmp.path().join("state")).unwrap();
        for (flags, moves) in [(0, true), (libc::O_NOATIME, false)] {
            let f = std::fs::File::options()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(&path)
                .unwrap();
            let rec = super::begin_record(&j, f.as_fd()).unwrap();
            let entries = j.entries().unwrap();
            assert_eq!(entries.len(), 1);
            let e = entries[0].1.as_ref().unwrap();
            assert_eq!(e.reads_moved_atime, moves, "flags {flags:#o}");
            rec.finish().unwrap();
        }
    }
}
