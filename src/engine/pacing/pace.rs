//! The pacer: as fast as the application on the same drive lets the
//! refresh go, never slower than the floor.
//!
//! **What it watches.** Every [`TICK`] it reads the drive's counters
//! (`/sys/block/<dev>/stat`: reads completed and the time they took) and
//! subtracts its own reads (counted as the block layer splits them, each
//! piece for its request's latency): what is left is the application's
//! reads and their mean latency over the last half second
//! ([`latency::Separator`]; our own reads it cannot count, opening,
//! planning and syncing a file, its unaligned tail, relocation's units,
//! are bracketed by readings of the counters and left out). Writes are
//! not the application waiting (the
//! page cache absorbs them; the filesystem's journal and lazy inode-table
//! init write in the background): they never hold the refresh back.
//!
//! **What it compares with.** The application's latency with the refresh
//! silent, learned: when the application first reads beside a refresh,
//! and again every [`RELEARN`] while it keeps reading (every
//! [`RELEARN_SOON`] until four learnings have timed its tail), the
//! refresh stops for [`LEARN`] (nothing of its own in flight: it first
//! waits, up to [`LEARN`] more, for its last reads and writes to
//! complete) and measures. On the testbed that cost 1.3 % of the refresh's time
//! (measured before it waited for writes); it is what lets one
//! target hold on drives of any speed — a 0.4 ms read on an SSD channel
//! and a 12 ms one behind a bfq queue alike — where a fixed threshold on
//! request counts (the pacer before this one) held on the drive it was
//! tuned on and nowhere else.
//!
//! **The control law.** `ratio` = the application's latency / its latency
//! alone, each [`DECIDE`], against an aim of 1.1 (below the [`TARGET`] of
//! 1.2: the mean is what the counters give, the tail needs room):
//! - above the aim: the rate is cut in proportion, to `rate × aim /
//!   ratio` (at most halved), and one request in flight (or as many as
//!   the floor needs, [`floor`]);
//! - below 0.92 × the aim: the rate grows by a quarter (a step per half
//!   second of evidence: a fresh window after each change), by half from
//!   the floor until the application first notices
//!   ([`GROWTH_FROM_THE_FLOOR`]), no further than half again what the
//!   refresh reads;
//! - in between: it holds, or tries a quarter more than the rate in
//!   effect (where growth may go that far: half again what the refresh
//!   reads), kept if at the next decision the application's latency
//!   rose by no more than [`DEPTH_COST`] of its latency alone and stayed
//!   within the aim, else back (not cut), with no more tried until the
//!   latency is learned again ([`rate_trial`]: a drive that reads the
//!   application a few per cent slower beside any I/O of ours held the
//!   rate at the floor).
//!
//! **The depth.** While the drive is shared, the depth bounds all our
//! requests at the drive, reads and writes together (a write holds a
//! channel as a read does), starting at one. When one at a time does not
//! read the rate's bytes, one more goes in flight on trial: the next
//! decision compares the application's latency with the one before, and
//! a rise of more than [`DEPTH_COST`] of its latency alone sends the
//! depth back, there to stay until the latency is learned again. The
//! mean cannot see the tail, but it sees the tail's cause: on the
//! testbed with two channels and a QD1 reader, a read and a write of
//! ours in flight made 3 % of the application's reads wait for a channel
//! (p99 2.2–2.4× alone) and its mean ~8 % longer, within the aim; held to
//! one request, the same cell measured mean 1.04× and p99 1.03× at 11.4
//! MiB/s in one run, 1.01× and 0.96× at 11.6 MiB/s in another (the best
//! fixed rate within 1.2×: 4 MiB/s; docs/benchmarks.md). On a drive with
//! channels to spare another request costs nothing and stays. The floor
//! raises the depth whatever it costs.
//!
//! **The request size.** The mean sees the time we hold the drive; the
//! tail sees how many of the application's reads wait behind us at all.
//! Each of our requests can make one of its reads wait, however large it
//! is: while sharing, requests are as large as keeps them under
//! [`TAIL_SHARE`] of the application's reads, and no larger than the
//! drive takes in one (a busy reader at QD1 on the testbed's one
//! channel: 512 KiB, p99 1.15× alone; at the 64 KiB the pacer before
//! this one sized them for, 6.2×; see [`Pacer::sharing_request`]), and
//! never smaller than a fixed rate's ([`REQUEST_TIME`]).
//!
//! **The floor.** The rate never goes below the floor: progress is a
//! promise, kept over time ([`floor`]: what learning's silence and a
//! short depth left behind is paid back, and the depth the floor needs
//! is kept while the controller cuts the rest, more of it while paying
//! back). When the
//! application has not read for [`QUIET`] (longer than the pauses of a
//! bursty reader), the refresh runs at the configured rate and depth;
//! an application that starts reading then is seen between ticks, at
//! most every [`ALONE_LOOK`], by the drive's reads beyond the most it
//! can have counted of ours, and the refresh learns before its next
//! requests.
//!
//! **Pauses.** A bursty application's pauses are shorter than that (a 2 s
//! burst, a 2 s pause): after [`PAUSE`] without a read, and [`PAUSE_GAPS`]
//! of its mean gap between reads (a light reader's reads come apart by
//! chance), the refresh runs at the configured rate and depth, its
//! requests still of the size sharing set. The application's first read
//! ends the pause before our next batch of requests, not at the next
//! tick: the executor's turns look at the drive's reads in flight
//! (`/sys/block/<dev>/inflight`, at most every [`PAUSE_LOOK`]) for one
//! that is not ours; that read waits
//! for at most what we have in flight. The controller's window starts
//! then: the time we ran fast is not held against its rate. A pause is
//! not yielding (`refreshctl status`, `refreshd_yielding`,
//! `yielded_seconds`), and the latency is not learned again in one.
//!
//! A refresh starts at its configured rate: on an idle drive it costs
//! nothing (a one-shot is as fast as `dd`). Beside an application it
//! learns first: the drive's reads in flight, and those completed
//! meanwhile, are looked at before the first request ([`START_LOOKS`]);
//! a reader that pauses just then is seen by the first tick.
//!
//! **The tail, a guard.** Where the drive's reads can be timed one by
//! one ([`tail`], `crate::io::block_reads`), the application's p99
//! there is learned beside its mean (over the last learnings' reads
//! together), shown, and guards the law: a window's p99 over the
//! [`TARGET`] its p99 alone holds the rate, ends the start from the
//! floor and sends a trial back (the next waits
//! [`tail::TRIALS_AFTER`]); over [`tail::FAR_OVER`] after a window over
//! the target, it cuts a quarter at least; the last [`tail::SPAN`]
//! windows' p99 together over [`tail::SPAN_AIM`] (below the target, as
//! the mean's aim is) cuts in proportion; after a
//! cut on the tail the rate grows no further than the cut, a bound that
//! rises a tenth every 30 s of decisions. The mean steers:
//! beside a QD1 reader on a loop device the mean read 1.04× at 50
//! MiB/s, where the tail was 2.5–3.4× for a minute; two laws that
//! steered on the tail itself lost the rate to its noise
//! (docs/benchmarks.md). Without the timing (the shipped unit leaves
//! out the capabilities it needs), the mean alone.
//!
//! Without readable counters (a device sysfs does not describe) it keeps
//! the configured rate and halves its depth when its own reads queue
//! behind each other ([`blind`]). If idle-class reads are starved below
//! the floor (bfq, mq-deadline), they are raised to best-effort 7.

use std::sync::Arc;
use std::time::Duration;

pub use crate::engine::types::PaceSettings;
pub use crate::engine::types::DEFAULT_FLOOR;
use crate::engine::types::{IoPriority, YieldMode, CHUNK_TIME};

mod blind;
mod control;
mod device;
mod floor;
mod latency;
mod rate_trial;
mod shared;
mod tail;
#[cfg(test)]
mod tests;

use crate::io::account::{OwnDone, OwnIo};
use crate::io::syscalls::{IOPRIO_BE7, IOPRIO_IDLE};
pub use device::{Counters, DeviceCounters, SysBlock};
pub use shared::{PaceStatus, Yielding};

/// How often the pacer looks at the drive.
pub const TICK: Duration = Duration::from_millis(100);
/// The application's latency may be this many times its latency alone
/// (the tail's guard holds and cuts the rate at it).
pub use tail::TARGET;
/// What the controller aims at: the mean with room below the target, for
/// the tail (measured on the testbed, 4 channels, a QD1 reader: a mean
/// held at 1.18× let the p99 reach 1.33×; at 1.1× it stays within 1.2×).
const AIM: f64 = 1.1;
/// One more request of ours in flight, or a quarter more rate
/// ([`rate_trial`]), is kept only if the application's latency rises by
/// no more than this (a share of its latency alone) at the next
/// decision. A drive with channels to spare does not notice another
/// request; one whose channels it fills does (on the testbed with two
/// channels and a reader one 4 KiB read at a time: with a read and a write
/// of ours in flight, 3 % of the application's reads waited over 1 ms,
/// its mean rose ~8 % and its p99 to 2.2× alone).
const DEPTH_COST: f64 = 0.05;
/// How often the rate changes (a window's worth of evidence each time).
pub const DECIDE: Duration = Duration::from_millis(500);
/// The growth mark: below it (1.012× the application's latency alone)
/// the application does not notice the refresh, and the rate grows;
/// between it and the aim the rate holds, with more on trial
/// ([`rate_trial`]).
const GROWTH_MARK: f64 = AIM * 0.92;
/// Below the growth mark the rate grows by this at a decision...
const GROWTH: f64 = 1.25;
/// ...and by this from the floor, until the application first shows it
/// notices (a decision at or over the growth mark, or a depth that cost
/// it): a start as TCP's slow start, which ends for good at the first
/// loss (a cut does not start it again: after one, the rate would climb
/// back past the knee by half a step each time). Every step is bounded
/// by half again what the refresh reads. Beside a QD1 reader on a loop
/// device whose mean read 0.98–1.02× at every decision but one, mostly
/// quarter steps took 4.2 s from the 4 MiB/s floor to 18.75 MiB/s, most
/// of a 5 s run (debug log, one run); a fixed 16 MiB/s ran at 16 from its
/// start.
const GROWTH_FROM_THE_FLOOR: f64 = 1.5;
/// The refresh is silent this long to learn the application's latency.
pub const LEARN: Duration = Duration::from_millis(400);
/// And learns again this often while the application keeps reading.
pub const RELEARN: Duration = Duration::from_secs(30);
/// ...and this soon while the tail's pool of learnings is young (fewer
/// than [`tail::POOLED`]): one learning's p99 is noise. In four 70 s runs
/// on the loop devices (16 cells' learnings, QD1 and QD8 readers), a
/// learning's p99 alone was 0.76–1.45× the idle run's (the first 0.89–
/// 1.31×), the pool of three 0.83–1.20×; at one every [`RELEARN`] the
/// first learning alone stands for 30 s and the pool is full after 90.
/// At one every 10 s it is full after 30, at the cost of two learnings
/// more in the first minute (0.8–1.6 s of silence, paid back by the
/// floor; a costly depth or rate is tried again after each, as after any
/// learning). At most three learnings come soon until the pool is full
/// again: an application that changes ([`tail::CHANGED`]) at every
/// learning is learned every [`RELEARN`] after its first three, one that
/// changes while its pool is young is hurried no further.
pub const RELEARN_SOON: Duration = Duration::from_secs(10);
/// With no read of the application this long, the drive is the refresh's.
pub const QUIET: Duration = Duration::from_secs(3);
/// While sharing, the application pauses when it has not read for this
/// long, and for [`PAUSE_GAPS`] of its mean gap between reads: the refresh
/// runs at the configured rate and depth, at the request size sharing set,
/// until the application has a read in flight.
pub const PAUSE: Duration = Duration::from_millis(300);
/// A pause is this many of the application's gaps between reads (an
/// application whose reads come at random is gone ten of its mean gaps by
/// chance once in e^10, 22,000 gaps).
pub const PAUSE_GAPS: u32 = 10;
/// In a pause, the drive's reads in flight are looked at no more often
/// than this (the executor asks for its allowance many times per
/// request; each look reads a sysfs file).
pub const PAUSE_LOOK: Duration = Duration::from_millis(1);
/// Alone, the drive's counters are looked at between ticks no more often
/// than this (a sysfs read per drive each: 500 a second at most): an
/// application that starts reading is seen after a few of its reads, not
/// up to a tick later, after a tick beside the configured rate and
/// depth. In the latency matrix the reader starts after the refresh;
/// beside a QD1 reader on a loop device the debug log showed it seen
/// after 4–256 of its reads (the look waits for the executor's next
/// turn, and the bound on ours has slack).
pub const ALONE_LOOK: Duration = Duration::from_millis(2);
/// A request while sharing the drive is at least this much of the rate's
/// time: the throttle's own chunk at that rate
/// ([`CHUNK_TIME`], 1/20 s), what a fixed rate sends. At
/// any rate the controller picks, its requests are then no more than a
/// fixed rate's, the setting it is judged against (where the drive takes
/// less in one request, `max_io` bounds both alike: the drive sees the
/// same pieces). Measured on loop-none (2 cores, where each request costs
/// the CPU the reader needs) at 1/100 s, requests of 112–220 KiB (4–8
/// MiB/s beside ~15,000 reads/s), one 5 s run each: reads of a QD1
/// reader past 1.2× its idle p99 1.10–1.51 % (3 runs; idle: 1 %), at
/// 1/20 s 0.83–1.14 % (5 runs); QD8 1.43–1.58 % against 0.99–1.19 %
/// (2 runs each); the mmap reader's p99 1.27–1.37× against 1.06–1.23×;
/// tb4 · QD8 1.26× against 1.15×; tb8 · QD8 1.47× both
/// (docs/benchmarks.md).
const REQUEST_TIME: f64 = CHUNK_TIME.as_secs_f64();
/// Our requests (reads and writes) per second while sharing are at most
/// this share of the application's reads per second, as far as the
/// request size can keep them there: each can make one of its reads
/// wait, and its p99 goes over as soon as more than 1 % of them wait
/// (half of that is ours; see [`Pacer::sharing_request`]). Past the
/// largest request a higher rate is more requests: the rate is not
/// held to the share. Measured to matter on the testbed's one channel
/// (the request sizes in [`Pacer::sharing_request`]), not on four (tb4 ·
/// QD1 met the target at 12.3 MiB/s with our requests 2 % of the
/// reader's reads); a rate capped to the share would have held the
/// testbed's QD1 readers to the floor (computed, not built:
/// docs/benchmarks.md).
const TAIL_SHARE: f64 = 0.005;
/// The smallest request while sharing the drive.
pub const MIN_REQUEST: u64 = 64 << 10;
/// The largest request while sharing the drive.
pub const MAX_REQUEST: u64 = 1 << 20;
/// Before the first request on a drive, it is looked at this many times
/// for reads in flight, [`START_LOOK_GAP`] apart (2 ms in all: nothing on
/// an idle drive), and for reads completed meanwhile (four or more, as
/// the tick asks of its window: a stray read is not an application). Seen here, the
/// refresh learns before its first request instead of running a tick at
/// the configured rate and depth beside it (measured on the testbed, 2
/// channels, the mmap reader: that first tick alone put the reader's p99
/// at 3.2× idle in a 5 s run). A reader at queue depth 1 on the testbed
/// has a read in flight nearly all the time; on a loop device whose
/// reads take 35 µs it has one only part of the time, and the looks
/// alone missed it 15 times in 300 (a poller in Python beside
/// `fio --rw=randread --bs=4k --iodepth=1`, 28,000 reads a second); some
/// of its reads completed within the looks every time.
const START_LOOKS: u32 = 8;
const START_LOOK_GAP: Duration = Duration::from_micros(250);

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

/// What the engine may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    pub rate: Option<u64>,
    /// Requests in flight at most (0: none new for now).
    pub depth: usize,
    /// Largest request (`None`: the planned chunk).
    pub request: Option<u64>,
    /// Whether `depth` bounds our writes too, not only our reads. While
    /// the drive is shared it does: a write holds one of the drive's
    /// channels as a read does.
    pub depth_bounds_writes: bool,
}

/// Where the pacer stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Nobody else reads: the configured rate and depth.
    Alone,
    /// Silent, measuring the application's latency without the refresh;
    /// `primed` once nothing of ours is in flight (or [`LEARN`] passed)
    /// and that tick (our last requests completing) was left out.
    Learning {
        until: Duration,
        primed: bool,
        /// Nothing of ours was in flight at the last tick.
        quiet: bool,
    },
    /// The application reads: the rate is the controller's.
    Sharing,
}

/// One more request in flight, on trial until the next decision.
#[derive(Debug, Clone, Copy)]
struct DepthTrial {
    /// The controller's depth before (the floor's is kept apart).
    before: usize,
    /// The application's latency ratio at it.
    ratio_before: f64,
}

/// A rate raised in the hold band, on trial until the next decision
/// (see [`rate_trial`]).
#[derive(Debug, Clone, Copy)]
struct RateTrial {
    /// The rate before.
    before: f64,
    /// The application's latency ratio at it.
    ratio_before: f64,
}

/// The controller. Time is passed in, so it is tested without sleeping.
pub struct Pacer {
    cfg: PaceSettings,
    /// Requests in flight when nobody else reads.
    max_depth: usize,
    own: Arc<OwnIo>,
    status: Arc<PaceStatus>,
    device: Option<Box<dyn DeviceCounters>>,
    reads: latency::Separator,
    phase: Phase,
    last_tick: Duration,
    /// The application's latency alone (ms), and when it was learned.
    baseline: Option<(f64, Duration)>,
    /// While learning: the application's reads and their time.
    learned: (u64, f64),
    /// The last time the application read.
    app_seen: Option<Duration>,
    /// The application's mean gap between reads while it reads (for its
    /// pauses).
    app_gap: Duration,
    /// Sharing, the application paused (see [`PAUSE`]).
    paused: bool,
    /// When the drive was last looked at between ticks: in a pause, for
    /// reads in flight ([`PAUSE_LOOK`]); alone, for reads completed
    /// ([`ALONE_LOOK`]). The two never overlap (a pause is in sharing);
    /// a look in a pause that ends in leaving the drive to the refresh
    /// holds the first look alone back by at most one [`ALONE_LOOK`].
    looked_between_ticks: Duration,
    /// Alone, whether the drive is looked at between ticks (not after a
    /// learning that found no application: the regular tick is left to
    /// find one).
    alone_looks: bool,
    /// The rate while sharing, and when it last changed.
    rate: f64,
    /// The application's reads per second, for the request size.
    app_reads_per_s: f64,
    decided: Duration,
    /// The controller's requests in flight (one, more on trial, or a
    /// trial kept); the floor's are kept apart, in `floor_account` (see
    /// `sharing_depth`).
    depth: usize,
    /// For the depth: sharing with reads of ours waiting, since the depth
    /// was last looked at.
    span: floor::Span,
    /// What the refresh owes its floor, and the depth the floor needs.
    floor_account: floor::FloorAccount,
    /// The application's latency ratio at the last decision.
    last_ratio: Option<f64>,
    /// A depth raised for more rate, on trial.
    depth_trial: Option<DepthTrial>,
    /// More than this depth cost the application (until it is learned
    /// again).
    depth_ceiling: Option<usize>,
    /// A rate raised in the hold band, on trial ([`rate_trial`]).
    rate_trial: Option<RateTrial>,
    /// More rate cost the application (until it is learned again).
    rate_trials_over: bool,
    /// No trial of more rate or depth before this: the last one put the
    /// tail over ([`tail::TRIALS_AFTER`]).
    trials_from: Duration,
    /// Growing by [`GROWTH_FROM_THE_FLOOR`]: since the refresh began to
    /// share the drive, the application has not shown it notices.
    slow_start: bool,
    /// Reads run best-effort: idle-class reads did not reach the floor.
    raised: bool,
    floor_check: (Duration, u64),
    blind: blind::Blind,
    /// Others read the drive before our first request on it.
    busy_at_start: bool,
    /// The application's p99 at the drive, where its reads are timed.
    tail: tail::Tail,
    /// A tick of the window since the last decision paid the floor back
    /// above the controller's rate.
    window_paid_back: bool,
}

impl Drop for Pacer {
    /// A refresh that ended yields no more, whatever it was doing when it
    /// ended (the status outlives it: it is the drive's).
    fn drop(&mut self) {
        self.status.set(None);
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("phase", &self.phase)
            .field("rate", &self.rate)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl Pacer {
    /// A pacer for `max_depth` requests in flight at most.
    pub fn new(
        cfg: PaceSettings,
        max_depth: usize,
        own: Arc<OwnIo>,
        status: Arc<PaceStatus>,
    ) -> Pacer {
        let p = Pacer {
            cfg,
            max_depth,
            own,
            status,
            device: None,
            reads: latency::Separator::default(),
            phase: Phase::Alone,
            last_tick: Duration::ZERO,
            baseline: None,
            learned: (0, 0.0),
            app_seen: None,
            app_gap: Duration::ZERO,
            paused: false,
            looked_between_ticks: Duration::ZERO,
            alone_looks: true,
            rate: cfg.floor.0 as f64,
            app_reads_per_s: 0.0,
            decided: Duration::ZERO,
            depth: 1,
            span: floor::Span::default(),
            floor_account: floor::FloorAccount::default(),
            last_ratio: None,
            depth_trial: None,
            depth_ceiling: None,
            rate_trial: None,
            rate_trials_over: false,
            trials_from: Duration::ZERO,
            slow_start: true,
            raised: false,
            floor_check: (Duration::ZERO, 0),
            blind: blind::Blind::new(max_depth),
            busy_at_start: false,
            tail: tail::Tail::default(),
            window_paid_back: false,
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
    /// read). Keeps what it learned when it is the same drive.
    pub fn set_device(&mut self, device: Option<Box<dyn DeviceCounters>>) {
        let same = match (&self.device, &device) {
            (Some(a), Some(b)) => a.name() == b.name(),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.device = device;
            self.reads.reset();
            self.baseline = None;
            self.app_seen = None;
            self.app_gap = Duration::ZERO;
            self.leave_sharing();
            self.alone_looks = true;
            self.tail = tail::Tail::default();
            self.busy_at_start = self.cfg.mode == YieldMode::Auto && self.others_read_at_start();
        }
    }

    /// Whether others read the drive (none of its reads are ours: this is
    /// before our first request on it): reads in flight at one of a few
    /// looks, or enough reads completed while it was looked at (as the
    /// tick asks of its window: a stray read is not an application).
    fn others_read_at_start(&mut self) -> bool {
        let Some(dev) = self.device.as_mut() else {
            return false;
        };
        let before = dev.read();
        for look in 0..START_LOOKS {
            if dev.reads_in_flight().is_some_and(|n| n > 0) {
                tracing::debug!(
                    "{}: reads in flight before the refresh starts: learning first",
                    dev.name()
                );
                return true;
            }
            if look + 1 < START_LOOKS {
                std::thread::sleep(START_LOOK_GAP);
            }
        }
        let done = match (before, dev.read()) {
            (Some(before), Some(after)) => after.since(before).reads,
            _ => 0,
        };
        let busy = done >= latency::MIN_READS / 2;
        if busy {
            tracing::debug!(
                "{}: {done} reads completed before the refresh starts: learning first",
                dev.name()
            );
        }
        busy
    }

    /// The configured rate (what plans are sized for).
    pub fn configured_rate(&self) -> Option<u64> {
        self.cfg.rate.map(|r| r.0)
    }

    fn floor(&self) -> u64 {
        let floor = self.cfg.floor.0;
        self.configured_rate().map_or(floor, |r| r.min(floor))
    }

    fn full(&self) -> f64 {
        self.configured_rate().map_or(f64::INFINITY, |r| r as f64)
    }

    /// What the engine may do now.
    pub fn allowance(&self) -> Allowance {
        let configured = Allowance {
            rate: self.configured_rate(),
            depth: self.max_depth,
            request: None,
            depth_bounds_writes: false,
        };
        if self.cfg.mode == YieldMode::Off {
            return configured;
        }
        match self.phase {
            Phase::Alone if self.device.is_none() => Allowance {
                depth: self.blind.depth(),
                ..configured
            },
            Phase::Alone => configured,
            Phase::Learning { .. } => Allowance {
                rate: Some(1),
                depth: 0,
                request: Some(self.sharing_request()),
                depth_bounds_writes: true,
            },
            Phase::Sharing if self.paused => Allowance {
                request: Some(self.sharing_request()),
                depth_bounds_writes: true,
                ..configured
            },
            Phase::Sharing => Allowance {
                rate: Some(self.sharing_rate() as u64),
                depth: self.sharing_depth(),
                request: Some(self.sharing_request()),
                depth_bounds_writes: true,
            },
        }
    }

    fn sharing_rate(&self) -> f64 {
        self.rate.max(self.floor_now()).min(self.full())
    }

    /// Requests in flight while sharing: the controller's depth, or what
    /// the floor needs now (more while what is owed is paid back).
    fn sharing_depth(&self) -> usize {
        let floor = self.floor() as f64;
        let for_floor = self
            .floor_account
            .depth(self.floor_now(), floor, self.max_depth);
        self.depth.max(for_floor)
    }

    /// The floor, and what is owed it paid back (see [`floor`]), within
    /// the configured rate.
    fn floor_now(&self) -> f64 {
        self.floor_account
            .rate(self.floor() as f64)
            .min(self.full())
    }

    /// Whether the drive may be looked at between ticks now, at most
    /// `every` (each look reads a sysfs file; the executor asks for its
    /// allowance many times per request): if so, the look is now.
    fn may_look_between_ticks(&mut self, now: Duration, every: Duration) -> bool {
        if now < self.looked_between_ticks + every {
            return false;
        }
        self.looked_between_ticks = now;
        true
    }

    /// In a pause, at most every [`PAUSE_LOOK`]: whether others read now.
    fn look_in_pause(&mut self, now: Duration) -> bool {
        self.may_look_between_ticks(now, PAUSE_LOOK) && self.others_read_now()
    }

    /// Alone, at most every [`ALONE_LOOK`]: whether an application began
    /// to read since the last tick. The drive's reads then, less the most
    /// it can have counted of ours (ended, in flight or not yet reaped,
    /// in the block layer's pieces:
    /// [`crate::io::account::most_pieces`]), are the
    /// application's; enough of them (what the tick asks of its window)
    /// and it reads. A stray read or two (an operator's `ls`) is not one.
    fn application_began_between_ticks(&mut self, now: Duration) -> bool {
        if self.phase != Phase::Alone
            || self.cfg.mode != YieldMode::Auto
            || !self.alone_looks
            || !self.may_look_between_ticks(now, ALONE_LOOK)
        {
            return false;
        }
        let Some(dev) = self.device.as_mut() else {
            return false;
        };
        let max_io = dev.max_io();
        let Some(reads) = dev.read().and_then(|c| self.reads.reads_since_tick(c)) else {
            return false;
        };
        let (ours, uncounted) = self.own.reads_the_drive_may_count(max_io);
        let others = reads.saturating_sub(ours);
        if uncounted || others < latency::MIN_READS / 2 {
            return false;
        }
        tracing::debug!(
            others,
            "{}: the application reads: learning now, not at the next tick",
            dev.name()
        );
        true
    }

    /// In a pause: whether the drive has reads in flight that are not
    /// ours (a sharing request is never larger than the drive takes in
    /// one: each of ours is one at the drive). Ours are counted from their
    /// submission to their reaping (or a drain), on this thread, which
    /// also calls this: never fewer than the drive's. The kernel's own reads for us
    /// (extent maps, metadata) end a pause early; an application's read
    /// a scheduler (mq-deadline, bfq) still queues is not counted until
    /// dispatched, and is seen then or at the next tick.
    fn others_read_now(&mut self) -> bool {
        let ours = self.own.reads_in_flight() as u64;
        let Some(dev) = self.device.as_mut() else {
            return false;
        };
        dev.reads_in_flight().is_some_and(|n| n > ours)
    }

    /// Looks at the drive if a tick has passed. Returns whether the
    /// allowance may have changed.
    pub fn tick(&mut self, now: Duration) -> bool {
        if std::mem::take(&mut self.busy_at_start) && self.phase == Phase::Alone {
            // An application is reading: learn its latency before the
            // first request (the first tick of learning primes the counts).
            self.last_tick = now;
            self.app_seen = Some(now);
            self.start_learning(now);
            return true;
        }
        if self.paused && self.look_in_pause(now) {
            // The application reads again: before our next requests, not
            // at the next tick.
            let before = self.allowance();
            self.app_seen = Some(now);
            self.resume(now);
            return self.allowance() != before;
        }
        if now < self.last_tick + TICK {
            if !self.application_began_between_ticks(now) {
                return false;
            }
            // The tick comes early: what ran alone is counted up to now,
            // and learning starts at it, before our next requests.
            self.app_seen = Some(now);
        }
        let elapsed = now.saturating_sub(self.last_tick);
        self.last_tick = now;
        let own = self.own.take();
        let before = self.allowance();
        let raised = self.raised;
        self.check_floor(elapsed, &own);
        if self.cfg.mode == YieldMode::Off {
            return self.raised != raised;
        }
        let Some(dev) = self.device.as_mut() else {
            self.blind.look(&own);
            return self.allowance() != before;
        };
        let counters = dev.read();
        let max_io = dev.max_io();
        let tick = self.reads.tick(counters, &own, max_io);
        // A tick's count alone can be a read of ours the drive counted a
        // tick before we reaped it: the application reads when the window
        // holds enough of its reads too.
        if tick.is_some_and(|t| t.reads > 0) && self.reads.reads() >= latency::MIN_READS / 2 {
            self.app_seen = Some(now);
            if let Some(gap) = self.reads.gap(TICK) {
                self.app_gap = gap;
            }
        }
        if matches!(self.phase, Phase::Sharing | Phase::Learning { .. }) && !self.paused {
            self.status.add(elapsed);
        }
        self.step(now, tick, &own, elapsed);
        self.allowance() != before || self.raised != raised
    }

    /// Our own I/O that we cannot count starts (see
    /// [`latency::Separator::begin_uncounted`]); without readable
    /// counters, the tick it falls in is left out.
    pub fn begin_uncounted(&mut self) {
        match self.device.as_mut().and_then(|d| d.read()) {
            Some(now) => {
                self.reads.begin_uncounted(now);
                self.own.set_in_section(true);
            }
            None => self.own.uncounted(),
        }
    }

    /// And ends.
    pub fn end_uncounted(&mut self) {
        self.own.set_in_section(false);
        let now = self.device.as_mut().and_then(|d| d.read());
        if !self.reads.end_uncounted(now) {
            self.own.uncounted();
        }
    }

    /// The drive's reads timed one by one so far, the application's:
    /// only while ours run at priorities the timing leaves out (with
    /// `io_priority = "inherit"` it would count ours as the
    /// application's).
    fn read_times(&mut self) -> Option<crate::io::block_reads::Histogram> {
        if !matches!(self.cfg.priority, IoPriority::Idle) {
            return None;
        }
        self.device.as_mut()?.read_times()
    }

    /// Reads run in the idle class, except while sharing the drive (the
    /// floor is a promise: best-effort 7 keeps a scheduler that starves
    /// the idle class from starving it), or for good once idle-class reads
    /// fell below half the floor for two seconds.
    fn set_read_ioprio(&self) {
        let sharing = matches!(self.phase, Phase::Sharing);
        let p = match self.cfg.priority {
            IoPriority::Inherit => 0,
            IoPriority::Idle if self.raised || sharing => IOPRIO_BE7,
            IoPriority::Idle => IOPRIO_IDLE,
        };
        self.own.set_read_ioprio(p);
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
        self.floor_check.1 += own.read_bytes();
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
