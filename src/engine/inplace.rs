//! In-place refresh of one file: open under the guard, plan, run the direct
//! chunks, rewrite unaligned pieces exactly through the page cache, restore
//! the timestamps, sync, check the layout, release the lease.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

use super::backend::IoBackend;
use super::exec::{self, ExecParams, StopReason, Throttle, Watch};
use super::guard::{self, FileMeta, Opened, Refusal, Target};
use super::plan::{self, Chunk, PlanParams};
use super::report::{FileReport, Outcome, ReadError, SkipReason};
use super::sys::{self, LeaseState};
use super::{relocate, EngineConfig, Progress};
use crate::config::Strategy;

/// The I/O thread's state: backend (ring + buffers) and throttle.
#[derive(Debug)]
pub struct Ctx {
    pub(crate) backend: Box<dyn IoBackend>,
    pub(crate) throttle: Throttle,
}

impl Ctx {
    pub fn new(backend: Box<dyn IoBackend>, cfg: &EngineConfig) -> Ctx {
        Ctx {
            backend,
            throttle: Throttle::new(cfg.rate, cfg.chunk),
        }
    }
}

/// The executor's watch on a real file.
struct FileWatch<'a> {
    fd: BorrowedFd<'a>,
    leased: bool,
    cancel: &'a AtomicBool,
    /// Watermark, when free space must be checked.
    watermark: Option<u64>,
}

impl Watch for FileWatch<'_> {
    fn should_stop(&mut self) -> Option<StopReason> {
        if self.cancel.load(Ordering::Relaxed) {
            return Some(StopReason::Cancelled);
        }
        if self.leased {
            // Any answer but "held" (including an error) means stop.
            match sys::lease_state(self.fd) {
                Ok(LeaseState::Held) => {}
                _ => return Some(StopReason::LeaseBroken),
            }
        }
        None
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
}

fn free_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

fn fs_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_blocks.saturating_mul(s.f_frsize))
}

/// Refreshes one file; never panics on bad input, always reports.
pub fn refresh_file(
    ctx: &mut Ctx,
    t: &Target,
    cfg: &EngineConfig,
    skip: u64,
    progress: Option<&mut Progress>,
) -> FileReport {
    let start = Instant::now();
    let span = tracing::info_span!("refresh", path = %t.display.display());
    let _enter = span.enter();
    let sw = cfg.unsafe_switches;
    // relocate: no lease (others may keep the file open). auto: in place
    // under a lease when we can have one, relocation when someone else has
    // the file open.
    let lease = cfg.strategy != Strategy::Relocate && !sw.no_lease;
    let mut relocate = cfg.strategy == Strategy::Relocate;
    let opened = match guard::open(t, lease) {
        Err(Refusal::Skip(SkipReason::InUse, _)) if cfg.strategy == Strategy::Auto => {
            relocate = true;
            guard::open(t, false)
        }
        other => other,
    };
    let opened = match opened {
        Ok(o) => o,
        Err(Refusal::Skip(reason, detail)) => {
            tracing::debug!(reason = reason.as_str(), %detail, "skipped");
            return FileReport::skipped(t.display.clone(), reason, detail);
        }
        Err(Refusal::Fail(reason)) => {
            tracing::warn!(%reason, "failed");
            return FileReport::new(t.display.clone(), Outcome::Failed { reason });
        }
    };
    let mut report = FileReport::new(t.display.clone(), Outcome::Refreshed);
    report.backend = Some(ctx.backend.kind());
    report.filesystem = Some(opened.fs);
    report.size = opened.meta.size;
    report.verified = cfg.verify;
    report.dev_ino = Some((opened.meta.dev, opened.meta.ino));
    let mut noop = |_: u64| {};
    let progress: &mut dyn FnMut(u64) = match progress {
        Some(p) => p,
        None => &mut noop,
    };
    report.outcome = if relocate {
        if !relocate::supported(opened.fs) {
            Outcome::Skipped {
                reason: SkipReason::StrategyUnavailable,
                detail: format!("no relocation on {}", opened.fs.name()),
            }
        } else {
            relocate::run(ctx, t, &opened, cfg, skip, &mut report, progress)
        }
    } else {
        run(ctx, &opened, cfg, skip, &mut report, progress)
    };
    if let Err(e) = opened.release() {
        tracing::warn!("releasing the lease: {e}");
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    match &report.outcome {
        Outcome::Refreshed => tracing::info!(bytes = report.bytes_refreshed, "refreshed"),
        other => tracing::info!(outcome = ?other, "not refreshed"),
    }
    report
}

fn run(
    ctx: &mut Ctx,
    o: &Opened,
    cfg: &EngineConfig,
    skip: u64,
    report: &mut FileReport,
    progress: &mut dyn FnMut(u64),
) -> Outcome {
    let fd = o.fd.as_fd();
    let sw = cfg.unsafe_switches;
    let align = match o.meta.dio_offset_align {
        Some(0) => {
            return Outcome::Skipped {
                reason: SkipReason::NoDirectIo,
                detail: "the filesystem reports no direct I/O for this file".into(),
            }
        }
        Some(a) => u64::from(a),
        // Older kernels: the page size is a safe alignment for any device.
        None => 4096,
    };
    if !align.is_power_of_two() || align > cfg.chunk {
        return Outcome::Failed {
            reason: format!("unusable direct-I/O alignment {align}"),
        };
    }
    let chunk = super::throttle::chunk_for_rate(cfg.chunk, ctx.throttle.rate(), align);
    let (seek, extents) = match plan::data_layout(fd, o.meta.size) {
        Ok(l) => l,
        Err(reason) => return Outcome::Failed { reason },
    };
    let params = PlanParams {
        size: o.meta.size,
        align,
        chunk,
        rewrite_shared: cfg.rewrite_shared,
        unsafe_write_holes: sw.write_holes,
        unsafe_direct_tail: sw.direct_tail,
    };
    let p = plan::plan(&params, &seek, &extents);
    report.excluded = p.excluded;
    report.bytes_planned = p.bytes();
    if p.chunks.is_empty() {
        return nothing_planned(&p, o.meta.size);
    }
    if cfg.dry_run {
        return Outcome::WouldRefresh;
    }
    let watermark = if (o.fs.is_cow() || cfg.rewrite_shared) && !sw.no_space_check {
        Some(
            cfg.min_free
                .unwrap_or_else(|| fs_bytes(fd).unwrap_or(0) / 20),
        )
    } else {
        None
    };
    let mut watch = FileWatch {
        fd,
        leased: o.leased,
        cancel: &cfg.cancel,
        watermark,
    };
    // Refuse up front when even the first chunk would cross the watermark.
    if let Err(why) = watch.space_for(p.chunks[0].len) {
        return Outcome::Skipped {
            reason: SkipReason::LowSpace,
            detail: why.to_string(),
        };
    }

    let mut direct: Vec<Chunk> = p.chunks.iter().copied().filter(|c| c.direct).collect();
    let mut buffered: Vec<Chunk> = p.chunks.iter().copied().filter(|c| !c.direct).collect();
    // Resuming: skip what an earlier run finished, in execution order.
    let mut skip = skip;
    plan::skip_done(&mut direct, &mut skip);
    plan::skip_done(&mut buffered, &mut skip);
    let xp = ExecParams {
        depth: cfg.depth,
        align,
        verify: cfg.verify,
        unsafe_write_failed_reads: sw.write_failed_reads,
    };
    let r = exec::run_direct(
        ctx.backend.as_mut(),
        fd.as_raw_fd(),
        &direct,
        &mut ctx.throttle,
        &mut watch,
        xp,
        progress,
    );
    report.bytes_refreshed = r.written;
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
    let mut failure = r.error.map(|e| e.to_string());

    if stop.is_none() && failure.is_none() && !buffered.is_empty() {
        match rewrite_buffered(
            fd,
            &buffered,
            &mut ctx.throttle,
            &mut watch,
            cfg.verify,
            progress,
        ) {
            Ok(BufferedResult { written, bad }) => {
                report.bytes_refreshed += written;
                report.read_errors.extend(bad);
            }
            Err(BufferedError::Stop(why, offset)) => {
                stop = Some(why);
                resume = Some(offset);
            }
            Err(BufferedError::Io(e)) => failure = Some(e),
        }
    }

    // Timestamps back while we still hold the lease; then make it durable.
    if !sw.no_time_restore {
        if let Err(e) = rustix::fs::futimens(fd, &o.meta.timestamps()) {
            failure.get_or_insert(format!("restoring atime/mtime: {e}"));
        }
    }
    if let Err(e) = rustix::fs::fsync(fd) {
        failure.get_or_insert(format!("fsync: {e}"));
    }
    if let Some(msg) = layout_changed(&o.meta, fd) {
        failure.get_or_insert(msg);
    }
    if let Some(reason) = failure {
        return Outcome::Failed { reason };
    }
    if let Some(why) = stop {
        let offset = resume.unwrap_or(0);
        return Outcome::Interrupted {
            offset,
            reason: why.to_string(),
        };
    }
    report.done_outcome()
}

/// Why an empty plan leaves the file alone.
pub(crate) fn nothing_planned(p: &plan::Plan, size: u64) -> Outcome {
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

/// Size and allocation must be what they were. A change here is a bug.
fn layout_changed(before: &FileMeta, fd: BorrowedFd<'_>) -> Option<String> {
    match guard::meta(fd) {
        Ok(after) if after.size != before.size => Some(format!(
            "size changed from {} to {} bytes",
            before.size, after.size
        )),
        Ok(after) if after.blocks != before.blocks => Some(format!(
            "allocation changed from {} to {} blocks",
            before.blocks, after.blocks
        )),
        Ok(_) => None,
        Err(e) => Some(format!("statx after refresh: {e}")),
    }
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
fn rewrite_buffered(
    fd: BorrowedFd<'_>,
    pieces: &[Chunk],
    throttle: &mut Throttle,
    watch: &mut dyn Watch,
    verify: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<BufferedResult, BufferedError> {
    let io_err =
        |op: &str, e: rustix::io::Errno| BufferedError::Io(format!("{op}: {}", io::Error::from(e)));
    let flags = fcntl_getfl(fd).map_err(|e| io_err("fcntl", e))?;
    fcntl_setfl(fd, flags - OFlags::DIRECT).map_err(|e| io_err("clearing O_DIRECT", e))?;
    let result = (|| {
        let mut out = BufferedResult {
            written: 0,
            bad: vec![],
        };
        let mut saved: Vec<(Chunk, Vec<u8>)> = Vec::new();
        for c in pieces {
            if let Some(why) = watch.should_stop() {
                return Err(BufferedError::Stop(why, c.offset));
            }
            watch
                .space_for(c.len)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            let mut buf = vec![0u8; c.len as usize];
            match read_exact_at(fd, &mut buf, c.offset) {
                Ok(()) => {}
                Err(e) => {
                    out.bad.push(ReadError {
                        offset: c.offset,
                        len: c.len,
                        error: e.to_string(),
                    });
                    continue;
                }
            }
            throttle
                .take_watching(c.len, watch)
                .map_err(|why| BufferedError::Stop(why, c.offset))?;
            write_all_at(fd, &buf, c.offset).map_err(|e| {
                BufferedError::Io(format!(
                    "writing {} bytes at offset {}: {e}",
                    c.len, c.offset
                ))
            })?;
            out.written += c.len;
            progress(c.len);
            if verify {
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
    })();
    let restore = fcntl_setfl(fd, flags);
    let out = result?;
    restore.map_err(|e| io_err("restoring O_DIRECT", e))?;
    Ok(out)
}

pub(crate) fn read_exact_at(fd: BorrowedFd<'_>, buf: &mut [u8], mut off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], off) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shorter than planned",
                ))
            }
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(crate) fn write_all_at(fd: BorrowedFd<'_>, buf: &[u8], mut off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pwrite(fd, &buf[done..], off) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
