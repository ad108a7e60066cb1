use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::engine::types::chunk_for_rate;

mod floor;
mod looks;
mod rate_trial;
mod tail;

/// Others' reads timed so far, and how many took how long between two
/// looks.
type TimedReads = (crate::io::block_reads::Histogram, Vec<(u64, Duration)>);

/// A drive whose counters the test moves.
#[derive(Clone, Default)]
struct FakeDrive {
    counters: Arc<Mutex<Option<Counters>>>,
    /// Others' reads in flight at every look.
    in_flight: Arc<Mutex<u64>>,
    /// How often the reads in flight were looked at.
    looks: Arc<Mutex<u64>>,
    /// Others' reads that complete while the reads in flight are looked
    /// at (counted at the next look).
    done_while_looked_at: Arc<Mutex<u64>>,
    /// Others' reads timed one by one (`None`: not timed), and how many
    /// took how long between two looks ([`FakeDrive::read_mixed`]).
    times: Arc<Mutex<Option<TimedReads>>>,
}

impl FakeDrive {
    /// From now on, `reads` reads of `each` between two looks at the
    /// timed reads.
    fn read_for(&self, reads: u64, each: Duration) {
        self.read_mixed(&[(reads, each)]);
    }

    /// From now on, between two looks at the timed reads, reads of each
    /// time: how many, how long.
    fn read_mixed(&self, reads: &[(u64, Duration)]) {
        let mut t = self.times.lock().unwrap();
        let h = t.take().map(|t| t.0).unwrap_or_default();
        *t = Some((h, reads.to_vec()));
    }

    /// `reads` reads taking `ms` milliseconds in all, and `writes` writes.
    fn add(&self, reads: u64, ms: u64, writes: u64) {
        let mut c = self.counters.lock().unwrap();
        let mut n = c.unwrap_or_default();
        n.reads += reads;
        n.read_ms += ms;
        n.writes += writes;
        *c = Some(n);
    }
}

impl DeviceCounters for FakeDrive {
    fn name(&self) -> &str {
        "sdz"
    }
    fn read(&mut self) -> Option<Counters> {
        *self.counters.lock().unwrap()
    }
    fn max_io(&self) -> u64 {
        512 << 10
    }
    fn reads_in_flight(&mut self) -> Option<u64> {
        *self.looks.lock().unwrap() += 1;
        let done = std::mem::take(&mut *self.done_while_looked_at.lock().unwrap());
        self.add(done, done, 0);
        Some(*self.in_flight.lock().unwrap())
    }
    fn read_times(&mut self) -> Option<crate::io::block_reads::Histogram> {
        let mut t = self.times.lock().unwrap();
        let (h, reads) = t.as_mut()?;
        for &(n, each) in reads.iter() {
            for _ in 0..n {
                h.add(each);
            }
        }
        Some(h.clone())
    }
}

const MIB: u64 = 1 << 20;
const FLOOR: u64 = 4 * MIB;
/// The application's reads a tick, unless a test says otherwise: 10,000
/// a second.
const APP_READS: u64 = 1_000;

struct Rig {
    pacer: Pacer,
    drive: FakeDrive,
    now: Duration,
}

impl Rig {
    fn new(mode: YieldMode, rate: Option<u64>) -> Rig {
        Rig::with_reads_in_flight(mode, rate, 0)
    }

    /// `in_flight`: others' reads in flight when the refresh starts.
    fn with_reads_in_flight(mode: YieldMode, rate: Option<u64>, in_flight: u64) -> Rig {
        let drive = FakeDrive::default();
        *drive.in_flight.lock().unwrap() = in_flight;
        Rig::on(drive, mode, rate)
    }

    fn on(drive: FakeDrive, mode: YieldMode, rate: Option<u64>) -> Rig {
        drive.add(0, 0, 0);
        let mut pacer = Pacer::new(
            PaceSettings {
                mode,
                priority: IoPriority::Idle,
                rate: rate.map(crate::units::Rate),
                floor: crate::units::Rate(FLOOR),
            },
            8,
            Arc::default(),
            Arc::default(),
        );
        pacer.set_device(Some(Box::new(drive.clone())));
        let mut r = Rig {
            pacer,
            drive,
            now: Duration::ZERO,
        };
        r.tick(); // the first reading of the counters
        r
    }

    fn tick(&mut self) -> bool {
        self.now += TICK;
        self.pacer.tick(self.now)
    }

    /// One tick: we read `own` 1 MiB requests of 5 ms (two pieces each for
    /// the drive), the application `app` reads of `app_ms` each.
    fn tick_with(&mut self, own: u64, app: u64, app_ms: f64) -> bool {
        for _ in 0..own {
            self.pacer
                .own()
                .read_done(MIB, Duration::from_millis(5), false);
        }
        let ms = own * 2 * 5 + (app as f64 * app_ms).round() as u64;
        self.drive.add(own * 2 + app, ms, 0);
        self.tick()
    }

    /// Ticks for `d` with the application reading [`APP_READS`] a tick.
    fn app_for(&mut self, d: Duration, own: u64, app_ms: f64) {
        let end = self.now + d;
        while self.now < end {
            self.tick_with(own, APP_READS, app_ms);
        }
    }

    fn sharing(&self) -> bool {
        self.pacer.phase == Phase::Sharing
    }

    /// Asserts that `refreshctl status` would say `words` of it.
    fn shows(&self, words: &str) {
        let y = self.pacer.status().yielding().expect("yielding");
        assert!(y.reason.contains(words), "{}", y.reason);
    }

    /// Just learned: the rate is the floor, and the silence of learning
    /// (and the tick before it) paid back within the next two seconds.
    fn shares_from_the_floor_up(&self) {
        let owed = self.pacer.floor_account.owed();
        let learning = FLOOR as f64 * (LEARN + 2 * TICK).as_secs_f64();
        assert!(owed > 0.0 && owed <= learning, "{owed} owed");
        assert_eq!(self.rate(), FLOOR + (owed / 2.0) as u64);
    }

    fn rate(&self) -> u64 {
        self.pacer.allowance().rate.unwrap()
    }

    /// The application arrives: learned at `alone_ms`, then sharing.
    fn shared_with(mut self, alone_ms: f64) -> Rig {
        self.tick_with(0, APP_READS, alone_ms);
        assert!(matches!(self.pacer.phase, Phase::Learning { .. }));
        assert_eq!(self.pacer.allowance().depth, 0, "silent while learning");
        self.app_for(LEARN, 0, alone_ms);
        assert!(self.sharing());
        self
    }
}

#[test]
fn an_idle_drive_gets_the_configured_rate_from_the_start() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    assert_eq!(
        r.pacer.allowance().rate,
        Some(50 * MIB),
        "no probe, no ramp"
    );
    assert_eq!(r.pacer.allowance().depth, 8);
    for _ in 0..30 {
        r.tick_with(8, 0, 0.0);
    }
    assert!(!r.sharing(), "our own reads are not an application");
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB));
}

#[test]
fn a_drive_busy_at_the_start_is_learned_before_the_first_request() {
    let mut r = Rig::with_reads_in_flight(YieldMode::Auto, Some(50 * MIB), 1);
    assert!(
        matches!(r.pacer.phase, Phase::Learning { .. }),
        "the first tick learns: {:?}",
        r.pacer.phase
    );
    assert_eq!(r.pacer.allowance().depth, 0, "nothing of ours in flight");
    r.app_for(LEARN, 0, 0.4);
    assert!(r.sharing());
    r.shares_from_the_floor_up();
    // Off: nobody looks.
    let off = Rig::with_reads_in_flight(YieldMode::Off, Some(50 * MIB), 1);
    assert_eq!(off.pacer.allowance().rate, Some(50 * MIB));
    assert_eq!(off.pacer.allowance().depth, 8);
}

#[test]
fn the_application_makes_it_learn_its_latency_then_share_from_the_floor() {
    let r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 0.05, "learned {alone} ms");
    r.shares_from_the_floor_up();
    let a = r.pacer.allowance();
    assert_eq!(a.depth, 1);
    // 10,000 reads a second: 50 of ours at most, each 2 × the rate / 50,
    // and no smaller than the throttle's chunk at the rate.
    let rate = r.rate() as f64;
    let for_tail = 2.0 * rate / 50.0;
    let size = (for_tail.max(rate * REQUEST_TIME) / 4096.0).ceil() as u64 * 4096;
    assert_eq!(a.request, Some(size), "at {rate} B/s");
    r.shows("the application reads on sdz");
    assert_eq!(
        r.pacer.own().read_ioprio(),
        IOPRIO_BE7,
        "the floor is a promise"
    );
}

/// At any rate the controller picks, its requests are no more than a
/// fixed rate's: none smaller than the throttle's chunk at that rate, as
/// busy as the application is (20,000 reads a second would ask for
/// requests of 84 KiB at the floor; a fixed 4 MiB/s sends 204 KiB).
#[test]
fn requests_are_no_more_than_a_fixed_rate_sends() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    let mut engine = SlowDrive::new(100 * MIB);
    engine.app_reads = 2_000;
    engine.run(&mut r, LEARN + TICK, 0.04);
    assert!(r.sharing());
    for _ in 0..40 {
        engine.tick(&mut r, 0.04);
        let a = r.pacer.allowance();
        let rate = a.rate.unwrap();
        // The throttle's chunk at the rate, within the drive's 512 KiB.
        let chunk = chunk_for_rate(512 << 10, Some(rate), 4096);
        let request = a.request.unwrap();
        assert!(
            request >= chunk,
            "{request} B requests at {rate} B/s: a fixed rate sends {chunk} B"
        );
    }
}

/// Each request of ours can make one of the application's reads wait:
/// while sharing, they are few enough that at most half a percent of its
/// reads do (its p99 sees 1 %), at every rate the controller goes through,
/// and no larger than that asks (a read that waits, waits for all of one).
#[test]
fn requests_are_few_enough_for_the_applications_tail() {
    for (reads_per_tick, alone_ms) in [(100, 0.4), (250, 0.4), (2_000, 0.04)] {
        let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
        // An engine that reads what it is allowed.
        let mut engine = SlowDrive::new(100 * MIB);
        engine.app_reads = reads_per_tick;
        engine.run(&mut r, LEARN + TICK, alone_ms);
        assert!(r.sharing());
        let app_reads_per_s = reads_per_tick as f64 / TICK.as_secs_f64();
        let mut seen = vec![];
        for _ in 0..60 {
            // Unhurt: the rate grows from the floor.
            engine.tick(&mut r, alone_ms);
            let a = r.pacer.allowance();
            let (rate, request) = (a.rate.unwrap() as f64, a.request.unwrap() as f64);
            let ours_per_s = 2.0 * rate / request;
            seen.push((rate, request));
            assert!(
                request <= (512 << 10) as f64,
                "one piece at the drive: {request}"
            );
            if request < (512 << 10) as f64 {
                assert!(
                    ours_per_s <= TAIL_SHARE * app_reads_per_s * 1.01,
                    "{ours_per_s:.0} requests of ours a second beside {app_reads_per_s:.0} reads"
                );
            }
            if request > MIN_REQUEST as f64 && request > rate * REQUEST_TIME + 4096.0 {
                assert!(
                    ours_per_s >= TAIL_SHARE * app_reads_per_s * 0.95,
                    "{request} B is larger than {app_reads_per_s:.0} reads a second ask"
                );
            }
        }
        let (first, last) = (seen[0], seen[seen.len() - 1]);
        assert!(last.0 > first.0 * 4.0, "the rate grew: {seen:?}");
        if reads_per_tick == 2_000 {
            assert!(last.1 > first.1, "and the request with it: {seen:?}");
        }
    }
}

/// The rate grows no further than half again what the refresh reads: a
/// rate it does not read is no evidence. With no configured rate it once
/// grew past 2^64 bytes/s while the application was unhurt (and the
/// request size overflowed when rounded after the cast).
#[test]
fn the_rate_grows_no_further_than_the_refresh_reads() {
    let mut r = Rig::new(YieldMode::Auto, None).shared_with(0.4);
    // 1 MiB a tick: 10 MiB/s.
    r.app_for(Duration::from_secs(120), 1, 0.4);
    assert_eq!(r.pacer.allowance().request, Some(512 << 10));
    assert!(r.rate() <= 15 * MIB, "{} B/s", r.rate());
    assert!(r.rate() >= 10 * MIB, "{} B/s: it grew", r.rate());
}

/// Another application is sized for afresh: what the one before read does
/// not carry over.
#[test]
fn a_new_application_is_sized_afresh() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    // A busy one, unhurt: 20,000 reads a second, and the rate grew.
    let mut engine = SlowDrive::new(100 * MIB);
    engine.app_reads = 2_000;
    engine.run(&mut r, Duration::from_secs(3), 0.04);
    assert!(r.sharing());
    assert!(r.pacer.app_reads_per_s > 10_000.0, "sized for it");
    assert!(r.rate() > 2 * FLOOR, "{} B/s: it grew", r.rate());
    // Gone: the drive is ours.
    engine.app_reads = 0;
    engine.run(&mut r, Duration::from_secs(4), 0.0);
    assert!(!r.sharing());
    assert_eq!(r.pacer.app_reads_per_s, 0.0);
    assert_eq!(r.pacer.rate, FLOOR as f64, "from the floor up");
}

#[test]
fn the_rate_grows_while_the_application_keeps_its_latency_and_is_cut_when_it_does_not() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    // Within the target: it grows every half second.
    r.app_for(DECIDE * 4, 1, 0.4);
    let grown = r.rate();
    assert!(grown >= FLOOR * 2, "grew from the floor: {grown}");
    // 2× its latency alone: cut to 1.1/2 of the rate, at once.
    r.app_for(DECIDE, 1, 0.8);
    let cut = r.rate();
    assert!(
        (cut as f64 - grown as f64 * 0.55).abs() < grown as f64 * 0.05 || cut == FLOOR,
        "{grown} → {cut}"
    );
    assert_eq!(r.pacer.allowance().depth, 1);
    r.shows("2.00× its 0.40 ms alone; refresh at ");
    r.shows("KiB requests (over its 1.1× aim: slowing down)");
    // Never above the configured rate.
    let mut r = Rig::new(YieldMode::Auto, Some(6 * MIB)).shared_with(0.4);
    r.app_for(Duration::from_secs(20), 1, 0.4);
    assert_eq!(r.rate(), 6 * MIB);
}

/// From the floor the rate grows by half a step until the application
/// first notices (the refresh reads all it is let: 100 MiB/s): 20 MiB/s
/// after four steps, where a quarter a step is 9.8. Once it notices
/// (1.05×, the hold band), a quarter a step for good, though it notices
/// nothing again.
#[test]
fn growth_from_the_floor_is_fast_until_the_application_notices() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    let mut engine = SlowDrive::new(100 * MIB);
    engine.run(&mut r, DECIDE * 4, 0.4);
    let mib = MIB as f64;
    assert!(r.pacer.rate >= 16.0 * mib, "{} MiB/s", r.pacer.rate / mib);
    engine.run(&mut r, DECIDE, 0.42);
    assert!(!r.pacer.slow_start);
    for _ in 0..3 {
        let before = r.pacer.rate;
        engine.run(&mut r, DECIDE, 0.4);
        let step = r.pacer.rate / before;
        assert!(
            step > 1.0 && step <= 1.25 + 1e-9,
            "{before} -> {}",
            r.pacer.rate
        );
    }
}

#[test]
fn the_floor_holds_however_the_application_suffers() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    r.app_for(Duration::from_secs(10), 1, 4.0);
    assert_eq!(r.rate(), FLOOR);
    assert!(r.sharing());
    r.shows("10.00× its 0.40 ms alone; refresh at 4.0 MiB/s in 208 KiB requests");
    r.shows("(over its 1.1× aim, held at the floor: progress is a promise)");
}

#[test]
fn one_more_read_in_flight_when_one_at_a_time_misses_the_rate() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    // 128 KiB per tick = 1.25 MiB/s: under the 4 MiB/s floor.
    for _ in 0..25 {
        r.pacer.own().read_started(128 << 10);
        r.pacer
            .own()
            .read_done(128 << 10, Duration::from_millis(80), true);
        r.pacer.own().read_ended(128 << 10);
        r.drive.add(1 + APP_READS, 80 + APP_READS * 4 / 10, 0);
        r.tick();
    }
    assert!(r.pacer.allowance().depth > 1, "{:?}", r.pacer.allowance());
}

/// Ticks for `d`, sharing: we read 512 KiB per tick (5 MiB/s: above the
/// floor, below a rate grown past it), the application [`APP_READS`] a tick
/// each taking what `at_depth` says for our depth now. Returns the ticks
/// spent with more than one request of ours allowed in flight.
fn share_for(r: &mut Rig, d: Duration, at_depth: impl Fn(usize) -> f64) -> u32 {
    let end = r.now + d;
    let mut deeper = 0;
    while r.now < end {
        let depth = r.pacer.allowance().depth;
        deeper += u32::from(depth > 1);
        let ms = at_depth(depth);
        r.pacer
            .own()
            .read_done(512 << 10, Duration::from_millis(5), false);
        r.drive
            .add(1 + APP_READS, 5 + (APP_READS as f64 * ms).round() as u64, 0);
        r.tick();
    }
    deeper
}

/// A trial lasts one decision's window (and the tick it starts in).
const TRIAL_TICKS: u32 = (DECIDE.as_millis() / TICK.as_millis()) as u32 + 1;

#[test]
fn more_depth_stays_when_the_application_does_not_notice() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    share_for(&mut r, Duration::from_secs(8), |_| 0.4);
    let depth = r.pacer.allowance().depth;
    assert!(depth >= 3, "a drive with channels to spare: depth {depth}");
    assert!(r.pacer.depth_ceiling.is_none());
}

#[test]
fn more_depth_that_costs_the_application_goes_back_and_stays_back() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    // One more request of ours makes each of its reads 6 % slower: under
    // the aim (the rate is not cut for it), over what depth may cost.
    let costly = |depth: usize| if depth > 1 { 0.425 } else { 0.4 };
    let deeper = share_for(&mut r, Duration::from_secs(8), costly);
    assert!(
        deeper <= TRIAL_TICKS,
        "{deeper} ticks deeper: {:?}",
        r.pacer
    );
    assert_eq!(r.pacer.depth_ceiling, Some(1));
    assert!(r.rate() > FLOOR, "the rate was not cut for it");
    // Learned again (every RELEARN), it tries once more and is judged
    // again: never a raise without a window to judge it by.
    let learned = r.pacer.baseline.unwrap().1;
    let deeper = share_for(&mut r, RELEARN, costly);
    assert!(r.pacer.baseline.unwrap().1 > learned, "learned again");
    assert!(
        deeper <= TRIAL_TICKS,
        "{deeper} ticks deeper: {:?}",
        r.pacer
    );
    assert_eq!(r.pacer.depth_ceiling, Some(1));
}

#[test]
fn the_floor_raises_the_depth_whatever_it_costs() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    share_for(&mut r, Duration::from_secs(8), |d| {
        if d > 1 {
            0.425
        } else {
            0.4
        }
    });
    assert_eq!(r.pacer.allowance().depth, 1);
    // Now one request at a time reads 1.25 MiB/s: under the floor.
    for _ in 0..15 {
        r.pacer
            .own()
            .read_done(128 << 10, Duration::from_millis(80), false);
        r.drive.add(1 + APP_READS, 80 + APP_READS * 43 / 100, 0);
        r.tick();
    }
    assert!(r.pacer.allowance().depth > 1, "{:?}", r.pacer.allowance());
}

#[test]
fn writes_never_hold_it_back() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    // The journal, lazy inode-table init, an application's writeback.
    for _ in 0..50 {
        r.drive.add(0, 0, 500);
        r.tick();
    }
    assert!(!r.sharing());
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB));
}

#[test]
fn it_learns_again_and_leaves_when_the_application_goes_quiet() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    r.app_for(RELEARN, 1, 0.4);
    // The application is heavier now: the next learning sees it.
    r.app_for(TICK, 1, 0.9);
    assert!(
        matches!(r.pacer.phase, Phase::Learning { .. }),
        "{:?}",
        r.pacer.phase
    );
    r.app_for(LEARN, 0, 0.9);
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.9).abs() < 0.1, "{alone}");
    // A bursty reader's 2 s pauses do not end sharing; 3 s do.
    r.app_for(DECIDE, 1, 0.9);
    for _ in 0..20 {
        r.tick_with(1, 0, 0.0);
    }
    assert!(r.sharing(), "2 s quiet: still sharing");
    for _ in 0..15 {
        r.tick_with(1, 0, 0.0);
    }
    assert!(!r.sharing());
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB));
    assert!(r.pacer.status().yielding().is_none());
}

/// Uncountable I/O of ours the pacer was told of without a section
/// leaves its whole tick out.
#[test]
fn ticks_with_uncountable_io_of_ours_are_left_out() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        // Relocation: the kernel copies for us, and says nothing.
        r.pacer.own().uncounted();
        r.drive.add(50, 50, 0);
        r.tick();
    }
    assert!(!r.sharing());
}

impl Rig {
    /// A section of our own I/O we cannot count (opening or planning a
    /// file, relocation's copy): the drive counts `reads` of it.
    fn uncounted(&mut self, reads: u64) {
        self.pacer.begin_uncounted();
        self.drive.add(reads, reads, 0);
        self.pacer.end_uncounted();
    }
}

/// Small files on a fast drive: a file opened and planned (three reads
/// of metadata) and synced every 50 ms, beside an application. The
/// sections are left out, not the ticks they fall in: a pacer that left
/// out every tick a file started in never saw the application (the loop
/// devices of the latency matrix, 4 MiB files at 50 MiB/s).
#[test]
fn small_files_do_not_hide_the_application() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        r.uncounted(3);
        r.uncounted(3);
        r.tick_with(1, APP_READS, 0.4);
    }
    assert!(r.sharing(), "{:?}", r.pacer.phase);
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 0.05, "learned {alone} ms");
}

/// Relocation reads its units inside its section: the drive counted
/// them there, and they are not left out a second time as reads of
/// ours (the application's reads and their time would read low).
#[test]
fn reads_of_ours_inside_a_section_are_left_out_once() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        r.pacer.begin_uncounted();
        for _ in 0..10 {
            r.pacer
                .own()
                .read_done(MIB, Duration::from_millis(5), false);
        }
        // Two pieces each for the drive.
        r.drive.add(20, 100, 0);
        r.pacer.end_uncounted();
        r.tick_with(0, APP_READS, 0.4);
    }
    assert!(r.sharing(), "{:?}", r.pacer.phase);
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 0.01, "learned {alone} ms");
}

/// A section begun where the counters could not be read leaves its
/// whole tick out: what the drive counted is not an application.
#[test]
fn a_section_without_counters_leaves_its_tick_out() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        let counters = r.drive.counters.lock().unwrap().take();
        r.pacer.begin_uncounted();
        *r.drive.counters.lock().unwrap() = counters;
        r.drive.add(50, 50, 0);
        r.pacer.end_uncounted();
        r.tick();
    }
    assert!(!r.sharing(), "{:?}", r.pacer.phase);
}

/// And our own metadata reads, in their sections, are not an
/// application, even when a section spans a tick (none does today:
/// `Throttle::uncounted` holds the pacer while its section runs).
#[test]
fn our_uncountable_reads_are_not_an_application() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        r.uncounted(3);
        r.uncounted(3);
        r.tick_with(1, 0, 0.0);
    }
    for _ in 0..10 {
        r.pacer.begin_uncounted();
        r.drive.add(30, 30, 0);
        r.tick();
        r.drive.add(30, 30, 0);
        r.pacer.end_uncounted();
        r.tick();
    }
    assert!(!r.sharing(), "{:?}", r.pacer.phase);
}

#[test]
fn without_counters_the_depth_follows_its_own_latency() {
    let mut r = Rig::new(YieldMode::Auto, Some(500 * MIB));
    r.pacer.set_device(None);
    let reads = |r: &mut Rig, n: usize, lat: u64, alone: bool| {
        for _ in 0..n {
            r.pacer
                .own()
                .read_done(MIB, Duration::from_millis(lat), alone);
        }
        r.tick();
    };
    reads(&mut r, 1, 10, true); // idle: 10 ms
    assert_eq!(r.pacer.allowance().depth, 8);
    reads(&mut r, 8, 80, false); // a queue of 8
    assert_eq!(r.pacer.allowance().depth, 4);
    reads(&mut r, 4, 40, false);
    assert_eq!(r.pacer.allowance().depth, 2);
    reads(&mut r, 2, 12, false); // near idle: one more
    assert_eq!(r.pacer.allowance().depth, 3);
    assert_eq!(r.pacer.allowance().rate, Some(500 * MIB));
}

#[test]
fn off_is_the_configured_rate_and_depth_whatever_happens() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    r.app_for(Duration::from_secs(5), 1, 3.0);
    assert_eq!(
        r.pacer.allowance(),
        Allowance {
            rate: Some(50 * MIB),
            depth: 8,
            request: None,
            depth_bounds_writes: false,
        }
    );
}

#[test]
fn starved_idle_reads_are_raised_to_best_effort_7() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    for _ in 0..40 {
        r.tick_with(0, 100, 0.5);
    }
    assert_eq!(
        r.pacer.own().read_ioprio(),
        IOPRIO_IDLE,
        "idle, not starved"
    );
    // A read waits and nothing completes for 2 s.
    r.pacer.own().read_started(MIB);
    for _ in 0..25 {
        r.tick_with(0, 100, 0.5);
    }
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_BE7, "raised");
}

#[test]
fn reads_at_the_floor_are_not_raised() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    for _ in 0..40 {
        // 4 MiB/s: 0.4 MiB per tick.
        for _ in 0..4 {
            r.pacer
                .own()
                .read_done(100 << 10, Duration::from_millis(2), true);
        }
        r.drive.add(4, 8, 0);
        r.tick();
    }
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_IDLE);
}

#[test]
fn writes_carry_best_effort_7_under_idle_and_the_threads_own_under_inherit() {
    assert_eq!(write_ioprio(IoPriority::Idle, 0), IOPRIO_BE7);
    assert_eq!(write_ioprio(IoPriority::Inherit, 0), 0);
    assert_eq!(write_ioprio(IoPriority::Inherit, IOPRIO_BE7), IOPRIO_BE7);
}

/// A bursty application (reads 2 s, pauses 2 s, at 100 reads a tick): in
/// its pauses the refresh runs at the configured rate and depth, at the
/// request size sharing set; the first tick it reads again brings the
/// controller's rate back, and the next decision judges the burst alone
/// (not the tick we ran fast in).
#[test]
fn the_applications_pauses_are_the_refreshs() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    // Grown from the floor, still within what is read (no depth on
    // trial: a pause would send it back).
    r.app_for(DECIDE * 2, 1, 0.4);
    let sharing = r.pacer.allowance();
    assert!(r.pacer.depth_trial.is_none());
    assert!(sharing.rate.unwrap() < 50 * MIB, "{sharing:?}");
    // Two ticks without a read: a gap, not yet a pause.
    r.tick_with(1, 0, 0.0);
    r.tick_with(1, 0, 0.0);
    assert_eq!(r.pacer.allowance(), sharing, "a gap of two ticks");
    for _ in 0..15 {
        r.tick_with(1, 0, 0.0);
        assert!(r.sharing());
    }
    let paused = r.pacer.allowance();
    assert_eq!(paused.rate, Some(50 * MIB), "paused: the configured rate");
    assert_eq!(paused.depth, 8, "and depth");
    assert_eq!(r.pacer.status().yielding(), None, "not yielding in a pause");
    assert_eq!(
        (paused.request, paused.depth_bounds_writes),
        (sharing.request, true),
        "at the sharing request size"
    );
    // It reads again, slowed by the tick we ran fast in: the controller's
    // rate at once, and that tick is not held against the rate.
    r.tick_with(1, 100, 1.2);
    assert_eq!(r.pacer.allowance(), sharing);
    r.shows("the application reads on sdz");
    r.app_for(DECIDE * 2, 1, 0.4);
    assert!(r.rate() >= sharing.rate.unwrap(), "{} after", r.rate());
}

/// A light reader's reads come apart by chance: a gap of three ticks is a
/// pause only for a reader that reads many times a tick; one reading 3 a
/// tick (30 a second) must be gone ten of its gaps.
#[test]
fn a_light_readers_gaps_are_not_pauses() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    for _ in 0..20 {
        r.tick_with(1, 3, 0.4);
    }
    let sharing = r.pacer.allowance();
    for _ in 0..3 {
        r.tick_with(1, 0, 0.0);
    }
    assert_eq!(r.pacer.allowance(), sharing, "3 ticks: within its gaps");
    for _ in 0..4 {
        r.tick_with(1, 0, 0.0);
    }
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "paused");
}

/// In a pause, a read of the application in flight ends it at once, not
/// at the next tick: before our next request, whatever the tick. Our own
/// reads in flight are told apart (the drive counts them too).
#[test]
fn a_pause_ends_at_the_applications_first_read_in_flight() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    // Grown from the floor, still within what is read (no depth on
    // trial: a pause would send it back).
    r.app_for(DECIDE * 2, 1, 0.4);
    let sharing = r.pacer.allowance();
    assert!(r.pacer.depth_trial.is_none());
    for _ in 0..5 {
        r.tick_with(1, 0, 0.0);
    }
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "paused");
    // Two reads of ours in flight, and the drive counts two: ours.
    r.pacer.own().read_started(MIB);
    r.pacer.own().read_started(MIB);
    *r.drive.in_flight.lock().unwrap() = 2;
    r.now += TICK / 10;
    assert!(!r.pacer.tick(r.now));
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "only ours");
    // A third: the application's, between two ticks.
    *r.drive.in_flight.lock().unwrap() = 3;
    r.now += TICK / 10;
    assert!(r.pacer.tick(r.now), "the allowance changed");
    assert_eq!(r.pacer.allowance(), sharing, "back to the controller's");
}

/// A pause is not yielding (the refresh runs at the configured rate, and
/// `yielded_seconds` counts time held back), and the latency is not
/// learned again in one (there would be nothing to learn): it is learned
/// when the application is back.
#[test]
fn a_pause_is_neither_yielded_time_nor_a_time_to_learn() {
    let mut r = Rig::new(YieldMode::Auto, None).shared_with(0.4);
    r.app_for(RELEARN - Duration::from_secs(1), 1, 0.4);
    let yielded = r.pacer.status().yielded();
    for _ in 0..20 {
        r.tick_with(1, 0, 0.0);
        assert!(r.sharing(), "{:?}", r.pacer.phase);
    }
    assert_eq!(r.pacer.allowance().rate, None, "paused, no configured rate");
    let paused_for = r.pacer.status().yielded() - yielded;
    assert!(paused_for <= TICK * 4, "{paused_for:?} counted as yielding");
    // The pause ends at the first tick it reads, learning starts at the
    // next.
    r.tick_with(1, 100, 0.4);
    r.tick_with(1, 100, 0.4);
    assert!(
        matches!(r.pacer.phase, Phase::Learning { .. }),
        "learned when it reads again: {:?}",
        r.pacer.phase
    );
}

/// A refresh that ends while it yields yields no more: the drive's status
/// outlives the pacer (the daemon showed "yielding" after a refresh that
/// ended in a pause, until the next one).
#[test]
fn an_ended_refresh_yields_no_more() {
    let r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    let status = r.pacer.status().clone();
    assert!(status.yielding().is_some());
    drop(r);
    assert_eq!(status.yielding(), None);
}

/// In a pause the executor asks for its allowance many times per request:
/// the drive's reads in flight (a sysfs file) are read at most once per
/// [`PAUSE_LOOK`].
#[test]
fn a_pause_looks_at_the_drive_at_most_once_a_millisecond() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    r.app_for(DECIDE * 4, 1, 0.4);
    for _ in 0..5 {
        r.tick_with(1, 0, 0.0);
    }
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "paused");
    let looks = *r.drive.looks.lock().unwrap();
    r.now += TICK / 10;
    for _ in 0..1000 {
        r.pacer.tick(r.now);
    }
    r.now += PAUSE_LOOK;
    r.pacer.tick(r.now);
    assert_eq!(
        *r.drive.looks.lock().unwrap() - looks,
        2,
        "looks at two instants"
    );
}

/// The bytes a [`SlowDrive`]'s request in flight counts for.
const IN_FLIGHT: u64 = 512 << 10;

/// A drive on which each request of ours in flight reads `per_request`
/// bytes a second, and an engine that reads what the allowance lets it:
/// its rate, at most `depth` requests in flight, in requests of its size
/// (one is in flight while the next request's bytes come in).
struct SlowDrive {
    per_request: f64,
    /// From this depth on, each request in flight reads `crowded`
    /// bytes a second (they queue on the drive's channels).
    crowded: Option<(usize, f64)>,
    /// The application's reads a tick.
    app_reads: u64,
    /// Bytes of the request in flight read so far.
    carry: f64,
    in_flight: bool,
    read: u64,
}

impl SlowDrive {
    fn new(per_request: u64) -> SlowDrive {
        SlowDrive {
            per_request: per_request as f64,
            crowded: None,
            app_reads: APP_READS,
            carry: 0.0,
            in_flight: false,
            read: 0,
        }
    }

    /// One tick beside an application doing `app_reads` of `app_ms`.
    fn tick(&mut self, r: &mut Rig, app_ms: f64) {
        let a = r.pacer.allowance();
        let own = r.pacer.own().clone();
        if a.depth == 0 {
            // Silent: the request in flight is left (its bytes with it).
            if std::mem::take(&mut self.in_flight) {
                own.read_ended(IN_FLIGHT);
            }
            self.carry = 0.0;
        } else if !self.in_flight {
            own.read_started(IN_FLIGHT);
            self.in_flight = true;
        }
        let request = a.request.unwrap_or(512 << 10);
        let tick = TICK.as_secs_f64();
        let per_request = match self.crowded {
            Some((from, crowded)) if a.depth >= from => crowded,
            _ => self.per_request,
        };
        self.carry += (a.depth as f64 * per_request * tick).min(a.rate.unwrap() as f64 * tick);
        let latency = Duration::from_secs_f64(request as f64 / per_request);
        let mut done = 0;
        while self.carry >= request as f64 {
            self.carry -= request as f64;
            own.read_done(request, latency, false);
            own.read_ended(IN_FLIGHT);
            own.read_started(IN_FLIGHT);
            self.read += request;
            done += 1;
        }
        let own_ms = done * latency.as_millis() as u64;
        r.drive.add(
            done + self.app_reads,
            own_ms + (self.app_reads as f64 * app_ms).round() as u64,
            0,
        );
        r.tick();
    }

    /// Ticks for `d`: the bytes read in them.
    fn run(&mut self, r: &mut Rig, d: Duration, app_ms: f64) -> u64 {
        let (end, before) = (r.now + d, self.read);
        while r.now < end {
            self.tick(r, app_ms);
        }
        self.read - before
    }
}

/// Learning waits for our writes as for our reads: the application's
/// reads beside a write of ours still in flight are not its latency
/// alone, and the learning counts its full time from when ours are done.
#[test]
fn learning_waits_for_our_writes_in_flight() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.pacer.own().write_started();
    // The application arrives while our write holds the drive: its
    // reads take 0.8 ms.
    for _ in 0..2 {
        r.tick_with(0, APP_READS, 0.8);
        assert!(matches!(
            r.pacer.phase,
            Phase::Learning { primed: false, .. }
        ));
    }
    r.pacer.own().write_ended();
    // The tick that saw it complete is skipped; then `LEARN - TICK` of
    // 0.4 ms reads are counted, and not a tick less.
    r.tick_with(0, APP_READS, 0.8);
    let primed = r.now;
    while r.now < primed + LEARN - TICK {
        assert!(
            matches!(r.pacer.phase, Phase::Learning { .. }),
            "{:?}",
            r.now
        );
        r.tick_with(0, APP_READS, 0.4);
    }
    assert!(r.sharing());
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 1e-9, "{alone}");
}

/// A tick that began with a request of ours in flight is not counted,
/// even if the request ended within it: learning primed when [`LEARN`]
/// ran out with a write still in flight counts only the ticks after.
#[test]
fn a_tick_our_request_ended_in_is_not_learned_from() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.pacer.own().write_started();
    r.tick_with(0, APP_READS, 0.8);
    let started = r.now;
    while matches!(r.pacer.phase, Phase::Learning { primed: false, .. }) {
        r.tick_with(0, APP_READS, 0.8);
    }
    assert!(r.now >= started + LEARN, "primed at {:?}", r.now);
    // Primed with the write in flight; it ends in the next tick.
    r.pacer.own().write_ended();
    r.tick_with(0, APP_READS, 0.8);
    while matches!(r.pacer.phase, Phase::Learning { .. }) {
        r.tick_with(0, APP_READS, 0.4);
    }
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 1e-9, "{alone}");
}

/// A write of ours that never ends (a stalled drive) delays learning by
/// at most [`LEARN`], and learning ends: nothing is learned with ours in
/// flight throughout (as with a read of ours before), and the drive is
/// the refresh's until the next tick that sees the application. (A ring
/// discarded with requests in it no longer counts them: fault_tests.)
#[test]
fn a_write_that_never_ends_does_not_keep_the_refresh_silent() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.pacer.own().write_started();
    r.tick_with(0, APP_READS, 0.4);
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
    let started = r.now;
    while matches!(r.pacer.phase, Phase::Learning { .. }) {
        assert!(
            r.now - started <= 2 * LEARN,
            "still learning at {:?}",
            r.now
        );
        r.tick_with(0, APP_READS, 0.4);
    }
    assert!(r.pacer.baseline.is_none());
    assert!(r.pacer.allowance().depth > 0, "silent");
}
