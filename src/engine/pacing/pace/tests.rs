use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;

/// A drive whose counters the test moves.
#[derive(Clone, Default)]
struct FakeDrive(Arc<Mutex<Option<(u64, u64)>>>);

impl FakeDrive {
    fn add(&self, reads: u64, writes: u64) {
        let mut c = self.0.lock().unwrap();
        let (r, w) = c.unwrap_or_default();
        *c = Some((r + reads, w + writes));
    }
}

impl DeviceCounters for FakeDrive {
    fn name(&self) -> &str {
        "sdz"
    }
    fn read(&mut self) -> Option<(u64, u64)> {
        *self.0.lock().unwrap()
    }
    fn max_io(&self) -> u64 {
        512 << 10
    }
}

const MIB: u64 = 1 << 20;

struct Rig {
    pacer: Pacer,
    drive: FakeDrive,
    now: Duration,
}

impl Rig {
    fn new(mode: YieldMode, rate: Option<u64>) -> Rig {
        let drive = FakeDrive::default();
        drive.add(0, 0);
        let mut pacer = Pacer::new(
            PaceConfig {
                mode,
                priority: IoPriority::Idle,
                rate,
                floor: 4 * MIB,
                depth: 8,
            },
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
                  // Past the gentle start.
        for _ in 0..30 {
            r.tick();
        }
        assert_eq!(r.pacer.allowance().rate, rate);
        r
    }

    /// One tick in which we read `own` MiB-sized requests (as the drive
    /// counts them: two each) and others issued `foreign` reads.
    fn tick_with(&mut self, own: u64, foreign: u64) -> bool {
        for _ in 0..own {
            self.pacer
                .own()
                .read_done(MIB, Duration::from_millis(5), false);
        }
        self.drive.add(own * 2 + foreign, 0);
        self.tick()
    }

    fn tick(&mut self) -> bool {
        self.now += TICK;
        self.pacer.tick(self.now)
    }

    fn yielding(&self) -> bool {
        self.pacer.status().yielding().is_some()
    }
}

fn fresh_pacer(drive: &FakeDrive) -> Pacer {
    let mut p = Pacer::new(
        PaceConfig {
            mode: YieldMode::Auto,
            priority: IoPriority::Idle,
            rate: Some(50 * MIB),
            floor: 4 * MIB,
            depth: 8,
        },
        Arc::default(),
        Arc::default(),
    );
    p.set_device(Some(Box::new(drive.clone())));
    p
}

#[test]
fn it_starts_with_a_short_look_at_the_floor_then_goes_full() {
    let drive = FakeDrive::default();
    drive.add(0, 0);
    let mut p = fresh_pacer(&drive);
    let a = p.allowance();
    assert_eq!(
        (a.rate, a.depth, a.request),
        (Some(4 * MIB), 1, Some(YIELD_REQUEST))
    );
    let mut now = Duration::ZERO;
    while p.allowance().rate != Some(50 * MIB) {
        now += TICK;
        p.tick(now);
        assert!(now <= PROBE + TICK, "full rate right after the probe");
    }
    assert_eq!(p.allowance().depth, 8);
    assert!(p.status().yielding().is_none(), "starting is not yielding");
}

#[test]
fn a_reader_seen_during_the_probe_means_yielding_from_the_start() {
    let drive = FakeDrive::default();
    drive.add(0, 0);
    let mut p = fresh_pacer(&drive);
    let mut now = Duration::ZERO;
    for _ in 0..5 {
        drive.add(100, 0);
        now += TICK;
        p.tick(now);
    }
    assert!(p.status().yielding().is_some());
    assert_eq!(p.allowance().rate, Some(4 * MIB));
}

#[test]
fn own_io_alone_never_yields() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..50 {
        r.tick_with(5, 0);
        assert!(!r.yielding());
    }
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB));
    assert!(r.pacer.status().yielding().is_none());
}

#[test]
fn a_request_reaped_after_the_tick_is_not_taken_for_another_process() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..20 {
        // The drive finished one of our requests before the tick, we saw
        // it after: +2 now, −2 next tick.
        r.drive.add(2, 0);
        r.tick_with(4, 0);
        r.pacer
            .own()
            .read_done(MIB, Duration::from_millis(5), false);
        r.tick_with(4, 0);
        assert!(!r.yielding());
    }
}

#[test]
fn other_readers_make_it_yield_at_the_floor_with_one_small_request() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(5, 0);
    assert!(r.tick_with(5, 200), "the allowance changed");
    let a = r.pacer.allowance();
    assert_eq!(a.rate, Some(4 * MIB));
    assert_eq!(a.depth, 1);
    assert_eq!(a.request, Some(YIELD_REQUEST));
    let y = r.pacer.status().yielding().expect("status says yielding");
    assert!(y.reason.contains("other processes read"), "{}", y.reason);
    assert!(y.reason.contains("sdz"), "{}", y.reason);
    for _ in 0..10 {
        r.tick_with(1, 200);
    }
    assert!(r.yielding());
    assert!(
        r.pacer.status().yielded() >= TICK * 10,
        "time spent yielding counted"
    );
}

#[test]
fn a_slowed_reader_is_still_seen() {
    // An application already slowed to ~20 reads/s by our queue.
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..3 {
        r.tick_with(1, 2);
    }
    assert!(r.yielding());
}

#[test]
fn back_to_the_full_rate_by_doubling_once_the_drive_is_quiet() {
    let mut r = Rig::new(YieldMode::Auto, Some(64 * MIB));
    r.tick_with(1, 100);
    assert!(r.yielding());
    // Quiet, but not for long enough yet.
    let quiet_ticks = (QUIET.as_millis() / TICK.as_millis()) as usize;
    for _ in 0..quiet_ticks - 1 {
        r.tick_with(0, 0);
        assert!(r.yielding());
    }
    let mut rates = vec![];
    for _ in 0..40 {
        r.tick_with(0, 0);
        rates.push(r.pacer.allowance().rate.unwrap());
    }
    rates.dedup();
    assert_eq!(
        rates,
        vec![4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB],
        "doubling from the floor"
    );
    assert!(r.pacer.status().yielding().is_none());
    assert_eq!(
        r.pacer.allowance().request,
        None,
        "full-size requests again"
    );
    // Anyone reading again: straight back to the floor.
    r.tick_with(0, 50);
    assert!(r.yielding());
}

#[test]
fn writes_of_the_filesystem_journal_do_not_count_as_an_application() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for i in 0..50 {
        r.drive.add(0, if i % 10 == 0 { 8 } else { 0 });
        r.tick_with(3, 0);
        assert!(!r.yielding());
    }
    // A writing application does.
    r.drive.add(0, 100);
    r.tick_with(3, 0);
    assert!(r.yielding());
    let y = r.pacer.status().yielding().unwrap();
    assert!(y.reason.contains("write"), "{}", y.reason);
}

#[test]
fn relocation_ticks_whose_io_cannot_be_counted_are_ignored() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    for _ in 0..10 {
        r.pacer.own().uncounted();
        r.drive.add(500, 500); // the kernel's copy and compare
        r.tick();
        assert!(!r.yielding());
    }
    // Between units the counters are clean again.
    r.tick_with(0, 0);
    r.tick_with(0, 100);
    assert!(r.yielding());
}

#[test]
fn without_counters_it_does_not_guess() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    *r.drive.0.lock().unwrap() = None;
    for _ in 0..10 {
        r.tick_with(1, 0);
        assert!(!r.yielding());
    }
}

#[test]
fn off_is_todays_fixed_rate_and_depth() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    for _ in 0..10 {
        assert!(!r.tick_with(1, 500), "a MiB per tick is above the floor");
    }
    assert_eq!(
        r.pacer.allowance(),
        Allowance {
            rate: Some(50 * MIB),
            depth: 8,
            request: None
        }
    );
    assert_eq!(
        r.pacer.own().read_ioprio(),
        IOPRIO_IDLE,
        "priorities still apply"
    );
}

/// Reads of `lat` ms each, `alone` or queued.
fn reads(r: &mut Rig, n: usize, lat: u64, alone: bool) {
    for _ in 0..n {
        r.pacer
            .own()
            .read_done(MIB, Duration::from_millis(lat), alone);
    }
    r.drive.add(2 * n as u64, 0);
    r.tick();
}

#[test]
fn depth_halves_when_own_reads_queue_and_grows_when_they_do_not() {
    // Blind: the drive's counters cannot be read (latency is all there is).
    let mut r = Rig::new(YieldMode::Auto, Some(500 * MIB));
    r.pacer.set_device(None);
    for _ in 0..WINDOW_TICKS {
        r.tick();
    }
    reads(&mut r, 1, 10, true); // idle: 10 ms
    assert_eq!(r.pacer.allowance().depth, 8);
    reads(&mut r, 8, 80, false); // a queue of 8
    assert_eq!(r.pacer.allowance().depth, 4);
    reads(&mut r, 4, 40, false);
    assert_eq!(r.pacer.allowance().depth, 2);
    reads(&mut r, 2, 20, false); // 2× idle: not more than QUEUED
    assert_eq!(r.pacer.allowance().depth, 2);
    reads(&mut r, 2, 12, false); // near idle: one more
    assert_eq!(r.pacer.allowance().depth, 3);
    for _ in 0..10 {
        reads(&mut r, 3, 11, false);
    }
    assert_eq!(
        r.pacer.allowance().depth,
        8,
        "never above the configured depth"
    );
}

#[test]
fn yielding_reads_run_best_effort_7_so_the_floor_holds_then_idle_again() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_IDLE);
    r.tick_with(1, 100);
    assert!(r.yielding());
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_BE7);
    // Quiet again: ramping, the idle class is enough.
    for _ in 0..15 {
        r.tick_with(0, 0);
    }
    assert!(!r.yielding());
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_IDLE);
}

#[test]
fn with_yielding_off_starved_idle_reads_are_raised_too() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    // Nothing to read: not starved, however long.
    for _ in 0..40 {
        r.tick_with(0, 100);
    }
    assert_eq!(
        r.pacer.own().read_ioprio(),
        IOPRIO_IDLE,
        "idle, not starved"
    );
    // A read waits and nothing completes for 2 s.
    r.pacer.own().read_started();
    for _ in 0..25 {
        r.tick_with(0, 100);
    }
    assert_eq!(r.pacer.own().read_ioprio(), IOPRIO_BE7, "raised");
    assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "not yielding");
}

#[test]
fn reads_at_the_floor_are_not_raised() {
    let mut r = Rig::new(YieldMode::Off, Some(50 * MIB));
    for _ in 0..40 {
        // 4 MiB/s: 0.4 MiB per tick, counted as 128 KiB reads.
        for _ in 0..3 {
            r.pacer
                .own()
                .read_done(YIELD_REQUEST, Duration::from_millis(2), true);
        }
        r.drive.add(3 + 100, 0);
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

#[test]
fn while_yielding_one_read_at_a_time_grows_to_reach_the_floor() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(0, 100);
    assert!(r.yielding());
    assert_eq!(r.pacer.allowance().depth, 1);
    // 128 KiB per tick = 1.25 MiB/s: under the 4 MiB/s floor.
    for _ in 0..25 {
        r.pacer.own().read_started();
        r.pacer
            .own()
            .read_done(YIELD_REQUEST, Duration::from_millis(80), true);
        r.pacer.own().read_ended();
        r.drive.add(1 + 100, 0);
        r.tick();
    }
    let d = r.pacer.allowance().depth;
    assert!(
        d > 1,
        "one more read in flight each second below the floor: {d}"
    );
    // Quiet: ramping starts from one again.
    for _ in 0..15 {
        r.tick_with(0, 0);
    }
    r.tick_with(0, 100);
    assert_eq!(r.pacer.allowance().depth, 1);
}
