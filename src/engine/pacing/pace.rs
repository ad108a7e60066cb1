//! Yielding to the application: the refresh paces itself by what the drive
//! can give, not only by a byte rate.
//!
//! Two signals, evaluated every [`TICK`]:
//! - **Other processes' I/O** on the drive: the drive's completed requests
//!   (`/sys/block/<dev>/stat`) minus the refresh's own, counted as the block
//!   layer splits them. When others read (or write a lot), the refresh
//!   *yields*: one request in flight, small requests, and the floor rate,
//!   until the drive has been quiet for [`QUIET`]; then it ramps back up,
//!   doubling every [`RAMP_STEP`].
//! - **Its own read latency** against the latency of a read that had the
//!   drive to itself: when requests queue behind each other (a rate above
//!   what the drive reads), the depth halves; when latency is back near
//!   idle, it grows by one. A saturated queue is what makes an
//!   application wait, whether or not the drive's counters can be read.
//!
//! Under a constant foreground load the refresh still moves at the floor;
//! if even that is not reached with idle-class reads (a scheduler that
//! starves the idle class), reads are raised to best-effort 7.

use std::sync::Arc;
use std::time::Duration;

pub use crate::engine::types::DEFAULT_FLOOR;
use crate::engine::types::{IoPriority, YieldMode};

mod device;
mod shared;
#[cfg(test)]
mod tests;

use crate::io::account::{OwnDone, OwnIo};
use crate::io::syscalls::{IOPRIO_BE7, IOPRIO_IDLE};
pub use device::{DeviceCounters, SysBlock};
pub use shared::{PaceStatus, Yielding};

/// How often the pacer looks at the drive.
pub const TICK: Duration = Duration::from_millis(100);
/// Ticks summed for a decision (the drive's counters and ours are read at
/// slightly different moments; a longer window evens that out).
const WINDOW_TICKS: usize = 3;
/// The drive must be quiet this long before the refresh ramps up again.
pub const QUIET: Duration = Duration::from_secs(1);
/// A new engine (or drive) first runs at the floor this long, to see
/// whether anyone else uses the drive before it goes to the full rate.
pub const PROBE: Duration = Duration::from_millis(300);
/// While ramping, the rate doubles this often.
pub const RAMP_STEP: Duration = Duration::from_millis(250);
/// Request size while yielding: short enough that a foreground read
/// queued behind one waits little.
pub const YIELD_REQUEST: u64 = 128 << 10;
/// Own reads slower than this many times the idle read: a queue.
const QUEUED: f64 = 2.0;
/// Own reads within this many times the idle read: room for one more.
const ROOM: f64 = 1.3;
/// Foreign writes in a window that count as the application writing
/// (journal commits of the filesystem are a few).
const WRITE_SLACK: u64 = 16;

/// The priority writes carry. Writes under a lease must finish inside the
/// lease-break time, so they never run in the idle class:
/// `thread_default` is what the thread's own class calls for (see
/// `syscalls::write_ioprio`).
pub fn write_ioprio(priority: IoPriority, thread_default: u16) -> u16 {
    match priority {
        IoPriority::Idle => IOPRIO_BE7,
        IoPriority::Inherit => thread_default,
    }
}

/// What the pacer was configured with.
#[derive(Debug, Clone, Copy)]
pub struct PaceConfig {
    pub mode: YieldMode,
    pub priority: IoPriority,
    /// The configured rate (`None`: unthrottled).
    pub rate: Option<u64>,
    /// The floor while yielding.
    pub floor: u64,
    /// Configured requests in flight.
    pub depth: usize,
}

/// What the engine may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    pub rate: Option<u64>,
    /// Requests in flight at most.
    pub depth: usize,
    /// Largest request (`None`: the planned chunk).
    pub request: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Just started: at the floor until the drive has been looked at.
    Probing {
        until: Duration,
    },
    Full,
    Yielding {
        quiet_since: Option<Duration>,
    },
    /// Back up from the floor: the rate doubles every step.
    Ramping {
        rate: u64,
        step_at: Duration,
    },
}

/// One tick's counts.
#[derive(Debug, Clone, Copy, Default)]
struct TickCounts {
    /// Negative when the drive counted a request of ours in an earlier
    /// tick than we reaped it: summed over the window, that cancels out.
    foreign_reads: i64,
    foreign_writes: i64,
    /// The most pieces one request of ours is split into.
    split: u64,
}

/// The controller. Time is passed in, so it is tested without sleeping.
pub struct Pacer {
    cfg: PaceConfig,
    own: Arc<OwnIo>,
    status: Arc<PaceStatus>,
    device: Option<Box<dyn DeviceCounters>>,
    last_counts: Option<(u64, u64)>,
    last_tick: Duration,
    window: Vec<Option<TickCounts>>,
    mode: Mode,
    depth: usize,
    /// Latency of a read of this length that had the drive to itself.
    alone: Option<(u64, Duration)>,
    /// Reads run best-effort: idle-class reads did not reach the floor.
    raised: bool,
    /// For the floor check: time our reads were waiting or completing,
    /// and the bytes they read meanwhile.
    floor_check: (Duration, u64),
    /// Reads in flight while yielding: one, more if one at a time does
    /// not reach the floor (old data read in small pieces is slow).
    yield_depth: usize,
    /// For that: time yielding with reads of ours waiting, bytes read.
    yield_check: (Duration, u64),
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("mode", &self.mode)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl Pacer {
    /// A pacer that starts with a [`PROBE`] at the floor with one small
    /// request (a refresh that starts beside a busy application never
    /// floods it before the first look at the drive).
    pub fn new(cfg: PaceConfig, own: Arc<OwnIo>, status: Arc<PaceStatus>) -> Pacer {
        let p = Pacer {
            cfg,
            own,
            status,
            device: None,
            last_counts: None,
            last_tick: Duration::ZERO,
            window: Vec::new(),
            mode: Mode::Probing { until: PROBE },
            depth: 1,
            alone: None,
            raised: false,
            floor_check: (Duration::ZERO, 0),
            yield_depth: 1,
            yield_check: (Duration::ZERO, 0),
        };
        p.set_read_ioprio();
        p
    }

    pub fn own(&self) -> &Arc<OwnIo> {
        &self.own
    }

    pub fn status(&self) -> &Arc<PaceStatus> {
        &self.status
    }

    /// The drive the next files live on (`None`: its counters cannot be
    /// read; only the latency signal is left). Keeps the state when it is
    /// the same drive.
    pub fn set_device(&mut self, device: Option<Box<dyn DeviceCounters>>) {
        let same = match (&self.device, &device) {
            (Some(a), Some(b)) => a.name() == b.name(),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.device = device;
            self.last_counts = None;
            self.window.clear();
            self.alone = None;
            if self.mode == Mode::Full {
                self.mode = Mode::Probing {
                    until: self.last_tick + PROBE,
                };
            }
        }
    }

    /// Reads run in the idle class, except while yielding: then the pace
    /// is already the floor, and best-effort 7 keeps a scheduler that
    /// starves the idle class (bfq, mq-deadline) from starving the floor.
    /// Also raised for good when idle-class reads fell below half the
    /// floor for two seconds.
    fn set_read_ioprio(&self) {
        let yielding = matches!(self.mode, Mode::Yielding { .. });
        let p = match self.cfg.priority {
            IoPriority::Inherit => 0,
            IoPriority::Idle if self.raised || yielding => IOPRIO_BE7,
            IoPriority::Idle => IOPRIO_IDLE,
        };
        self.own.set_read_ioprio(p);
    }

    /// What the engine may do now.
    pub fn allowance(&self) -> Allowance {
        let full = self.cfg.rate;
        match self.mode {
            _ if self.cfg.mode == YieldMode::Off => Allowance {
                rate: full,
                depth: self.cfg.depth,
                request: None,
            },
            Mode::Full => Allowance {
                rate: full,
                depth: self.depth,
                request: None,
            },
            Mode::Yielding { .. } => Allowance {
                rate: Some(self.floor()),
                depth: self.yield_depth,
                request: Some(YIELD_REQUEST),
            },
            Mode::Probing { .. } => Allowance {
                rate: Some(self.floor()),
                depth: 1,
                request: Some(YIELD_REQUEST),
            },
            Mode::Ramping { rate, .. } => {
                let half = full.map_or(u64::MAX, |r| r / 2);
                Allowance {
                    rate: Some(rate),
                    depth: self.depth,
                    request: (rate < half).then_some(YIELD_REQUEST),
                }
            }
        }
    }

    fn floor(&self) -> u64 {
        self.cfg
            .rate
            .map_or(self.cfg.floor, |r| r.min(self.cfg.floor))
    }

    /// Looks at the drive if a tick has passed. Returns whether the
    /// allowance may have changed.
    pub fn tick(&mut self, now: Duration) -> bool {
        if now < self.last_tick + TICK {
            return false;
        }
        let elapsed = now.saturating_sub(self.last_tick);
        self.last_tick = now;
        let own = self.own.take();
        let before = (self.mode, self.depth, self.raised);
        if self.cfg.mode == YieldMode::Off {
            // No yielding; only the floor holds against a scheduler that
            // starves idle-class reads.
            self.check_floor(elapsed, &own);
            return self.raised != before.2;
        }
        let counts = self.count(&own);
        self.window.push(counts);
        if self.window.len() > WINDOW_TICKS {
            self.window.remove(0);
        }
        if matches!(self.mode, Mode::Yielding { .. }) {
            self.status.add(elapsed);
        }
        self.decide(now);
        self.adjust_depth(&own);
        self.check_floor(elapsed, &own);
        let yield_depth = self.yield_depth;
        self.keep_the_floor(elapsed, &own);
        (self.mode, self.depth, self.raised) != before || self.yield_depth != yield_depth
    }

    /// This tick's foreign and own I/O; `None` when it cannot be told
    /// apart (no counters, or the kernel did uncountable I/O of ours).
    fn count(&mut self, own: &OwnDone) -> Option<TickCounts> {
        let dev = self.device.as_mut()?;
        let Some((reads, writes)) = dev.read() else {
            self.last_counts = None;
            return None;
        };
        let last = self.last_counts.replace((reads, writes))?;
        if own.uncounted {
            return None;
        }
        let max_io = dev.max_io().max(4096);
        let ios = |len: u64| len.div_ceil(max_io).max(1);
        let own_read_ios: u64 = own.reads.iter().map(|r| ios(r.0)).sum();
        let own_write_ios: u64 = own.writes.iter().map(|&l| ios(l)).sum();
        let signed = |a: u64, b: u64| {
            i64::try_from(a).unwrap_or(i64::MAX) - i64::try_from(b).unwrap_or(i64::MAX)
        };
        let split = own
            .reads
            .iter()
            .map(|r| r.0)
            .chain(own.writes.iter().copied());
        Some(TickCounts {
            foreign_reads: signed(reads.saturating_sub(last.0), own_read_ios),
            foreign_writes: signed(writes.saturating_sub(last.1), own_write_ios),
            split: split.map(ios).max().unwrap_or(1),
        })
    }

    /// Someone else is using the drive: the reason, if so.
    fn foreign(&self) -> Option<String> {
        let ticks: Vec<TickCounts> = self.window.iter().flatten().copied().collect();
        if ticks.is_empty() {
            return None;
        }
        let sum = |f: fn(&TickCounts) -> i64| ticks.iter().map(f).sum::<i64>().max(0) as u64;
        let reads = sum(|t| t.foreign_reads);
        let writes = sum(|t| t.foreign_writes);
        // A request of ours the drive finished before the window's end
        // and we reap after it still counts as foreign: allow for one.
        let slack = 2 + ticks.iter().map(|t| t.split).max().unwrap_or(1);
        let secs = TICK.as_secs_f64() * ticks.len() as f64;
        let name = self.device.as_ref().map_or("the drive", |d| d.name());
        if reads > slack {
            Some(format!(
                "other processes read {:.0} requests/s on {name}",
                reads as f64 / secs
            ))
        } else if writes > WRITE_SLACK + slack {
            Some(format!(
                "other processes write {:.0} requests/s on {name}",
                writes as f64 / secs
            ))
        } else {
            None
        }
    }

    fn decide(&mut self, now: Duration) {
        let foreign = self.foreign();
        let mode = match (self.mode, &foreign) {
            (Mode::Yielding { .. }, Some(_)) => Mode::Yielding { quiet_since: None },
            (_, Some(why)) => {
                tracing::info!("yielding to the application: {why}");
                self.status.set(Some(Yielding {
                    since: crate::inventory::now_secs(),
                    reason: why.clone(),
                }));
                Mode::Yielding { quiet_since: None }
            }
            (Mode::Yielding { quiet_since }, None) => {
                let since = quiet_since.unwrap_or(now);
                if now.saturating_sub(since) >= QUIET {
                    self.status.set(None);
                    self.depth = 1;
                    Mode::Ramping {
                        rate: self.floor(),
                        step_at: now + RAMP_STEP,
                    }
                } else {
                    Mode::Yielding {
                        quiet_since: Some(since),
                    }
                }
            }
            (Mode::Probing { until }, None) => {
                let looked = self.device.is_none() || self.window.iter().any(Option::is_some);
                if now >= until && looked {
                    self.depth = self.cfg.depth;
                    Mode::Full
                } else {
                    Mode::Probing { until }
                }
            }
            (Mode::Ramping { rate, step_at }, None) if now >= step_at => {
                let next = rate.saturating_mul(2);
                self.depth = (self.depth * 2).min(self.cfg.depth);
                match self.cfg.rate {
                    Some(full) if next < full => Mode::Ramping {
                        rate: next,
                        step_at: now + RAMP_STEP,
                    },
                    None if next < 1 << 30 => Mode::Ramping {
                        rate: next,
                        step_at: now + RAMP_STEP,
                    },
                    _ => {
                        tracing::info!("the drive is quiet: back to the full rate");
                        Mode::Full
                    }
                }
            }
            (m, None) => m,
        };
        self.mode = mode;
        self.set_read_ioprio();
    }

    /// Halves the depth when our reads queue behind each other; grows it
    /// by one when they are back near the latency of a read alone. Only
    /// while the drive's counters cannot tell whether anyone else uses it:
    /// when they can, a queue of ours delays nobody (someone reading makes
    /// the refresh yield), and the full depth keeps an aged drive busy.
    fn adjust_depth(&mut self, own: &OwnDone) {
        for &(len, lat, alone) in &own.reads {
            if alone {
                self.alone = Some(match self.alone {
                    Some((l, best)) if l == len => (len, best.min(lat)),
                    _ => (len, lat),
                });
            }
        }
        if matches!(self.mode, Mode::Yielding { .. }) {
            return;
        }
        if self.window.iter().any(Option::is_some) {
            // The drive can be watched: no one else is on it.
            self.depth = self.cfg.depth.min(self.depth.max(1) * 2);
            return;
        }
        let Some((len, idle)) = self.alone else {
            return;
        };
        let mut same: Vec<Duration> = own
            .reads
            .iter()
            .filter(|r| r.0 == len)
            .map(|r| r.1)
            .collect();
        if same.is_empty() {
            return;
        }
        same.sort();
        let median = same[same.len() / 2].as_secs_f64();
        let idle = idle.as_secs_f64().max(1e-6);
        if median > QUEUED * idle && self.depth > 1 {
            self.depth /= 2;
        } else if median <= ROOM * idle && self.depth < self.cfg.depth {
            self.depth += 1;
        }
    }

    /// While yielding: if one read at a time does not reach 80 % of the
    /// floor over a second in which reads of ours were waiting, allow one
    /// more in flight (at most the configured depth). Leaving yielding
    /// starts over from one.
    fn keep_the_floor(&mut self, elapsed: Duration, own: &OwnDone) {
        if !matches!(self.mode, Mode::Yielding { .. }) {
            self.yield_depth = 1;
            self.yield_check = (Duration::ZERO, 0);
            return;
        }
        if own.reads.is_empty() && self.own.reads_in_flight() == 0 {
            return;
        }
        self.yield_check.0 += elapsed;
        self.yield_check.1 += own.reads.iter().map(|r| r.0).sum::<u64>();
        let (span, bytes) = self.yield_check;
        if span >= Duration::from_secs(1) {
            let want = self.floor() as f64 * span.as_secs_f64() * 0.8;
            if (bytes as f64) < want {
                self.yield_depth = (self.yield_depth + 1).min(self.cfg.depth.max(1));
            }
            self.yield_check = (Duration::ZERO, 0);
        }
    }

    /// With idle-class reads: if, over two seconds in which our reads
    /// were waiting, they did not read half the floor, the scheduler
    /// starves them; raise them to best-effort 7 for the rest of the
    /// engine's life. (Time with no read of ours waiting does not count:
    /// an engine between files is not starved.)
    fn check_floor(&mut self, elapsed: Duration, own: &OwnDone) {
        if self.own.read_ioprio() != IOPRIO_IDLE {
            self.floor_check = (Duration::ZERO, 0);
            return;
        }
        if own.reads.is_empty() && self.own.reads_in_flight() == 0 {
            return;
        }
        self.floor_check.0 += elapsed;
        self.floor_check.1 += own.reads.iter().map(|r| r.0).sum::<u64>();
        let (span, bytes) = self.floor_check;
        if span >= Duration::from_secs(2) {
            let want = self.floor() as f64 * span.as_secs_f64() / 2.0;
            if (bytes as f64) < want {
                tracing::warn!(
                    "idle-priority reads are starved below the floor; raising them to best-effort 7"
                );
                self.raised = true;
                self.set_read_ioprio();
            }
            self.floor_check = (Duration::ZERO, 0);
        }
    }
}
