//! The looks at the drive outside the ticks: before the first request
//! on a drive, and between ticks while the refresh runs alone.

use super::*;

/// A reader whose reads are in flight only briefly (a loop device's
/// 35 µs reads at queue depth 1, with the reader's own time between
/// them) may have none in flight at any of the looks; its reads
/// completed while we looked still show it. A stray read or three do
/// not.
#[test]
fn reads_completed_while_looked_at_are_learned_before_the_first_request() {
    let busy = FakeDrive::default();
    // Counters far from zero: what counts is what completed meanwhile.
    busy.add(1_000, 400, 0);
    *busy.done_while_looked_at.lock().unwrap() = 4;
    let r = Rig::on(busy, YieldMode::Auto, Some(50 * MIB));
    assert!(
        matches!(r.pacer.phase, Phase::Learning { .. }),
        "the first tick learns: {:?}",
        r.pacer.phase
    );
    assert_eq!(r.pacer.allowance().depth, 0, "nothing of ours in flight");
    for (done, what) in [(0, "an idle drive"), (3, "a stray three")] {
        let drive = FakeDrive::default();
        drive.add(1_000, 400, 0);
        *drive.done_while_looked_at.lock().unwrap() = done;
        let r = Rig::on(drive, YieldMode::Auto, Some(50 * MIB));
        assert_eq!(r.pacer.phase, Phase::Alone, "{what}");
        assert_eq!(r.pacer.allowance().rate, Some(50 * MIB), "{what}");
        assert_eq!(r.pacer.allowance().depth, 8, "{what}");
    }
}

/// Our reads as a drive may count them since the last tick: `ended`
/// whole reads of 1 MiB ended (completed, failed or drained), and
/// `in_flight` more submitted.
fn ours(r: &Rig, ended: u64, in_flight: u64) {
    let own = r.pacer.own();
    for _ in 0..ended + in_flight {
        own.read_started(MIB);
    }
    for _ in 0..ended {
        own.read_ended(MIB);
    }
}

/// Alone at the configured rate, an application that starts reading
/// between two ticks is seen within a few of its reads: the tick comes
/// early and learning starts, before our next requests. The most the
/// drive can have counted of ours (ended, in flight, in the block
/// layer's pieces) and a stray read or three are not an application.
#[test]
fn an_application_that_starts_between_ticks_is_learned_at_once() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(8, 0, 0.0);
    assert_eq!(r.pacer.phase, Phase::Alone);
    // 4 ended and 8 in flight, 1 MiB each, at most 2 pieces and one
    // more each at the drive's 512 KiB: 16 + 32 reads.
    ours(&r, 4, 8);
    r.drive.add(48 + 3, 30, 0);
    r.now += ALONE_LOOK;
    assert!(!r.pacer.tick(r.now));
    assert_eq!(r.pacer.phase, Phase::Alone, "ours, and a stray three");
    // Within a look (at most one every ALONE_LOOK)...
    r.drive.add(1, 1, 0);
    r.now += ALONE_LOOK / 2;
    assert!(!r.pacer.tick(r.now));
    assert_eq!(r.pacer.phase, Phase::Alone);
    // ...and at the next: four of the application's reads.
    r.now += ALONE_LOOK / 2;
    assert!(r.pacer.tick(r.now), "the allowance changed");
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
    assert_eq!(r.pacer.allowance().depth, 0, "nothing more of ours");
    // Our last requests complete in the first tick of learning, which
    // comes a little late (a tick is an executor's turn at or after
    // TICK): the application's reads waited behind them, 10× its
    // latency alone. That tick is left out whenever it comes.
    for _ in 0..8 {
        r.pacer.own().read_ended(MIB);
    }
    r.now += TICK + Duration::from_millis(3);
    r.drive.add(APP_READS, APP_READS * 4, 0);
    r.pacer.tick(r.now);
    r.app_for(LEARN, 0, 0.4);
    assert!(r.sharing());
    let (alone, _) = r.pacer.baseline.unwrap();
    assert!((alone - 0.4).abs() < 0.05, "learned {alone} ms");
}

/// Only alone, only yielding: sharing, the ticks see the application;
/// with `--yield off` nothing is looked for.
#[test]
fn the_drive_is_looked_at_between_ticks_only_alone() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    let before = r.pacer.allowance();
    r.drive.add(100, 40, 0);
    r.now += ALONE_LOOK;
    assert!(!r.pacer.tick(r.now));
    assert!(r.sharing());
    assert_eq!(r.pacer.allowance(), before);
    let mut off = Rig::new(YieldMode::Off, Some(50 * MIB));
    off.drive.add(100, 40, 0);
    off.now += ALONE_LOOK;
    assert!(!off.pacer.tick(off.now));
    assert_eq!(off.pacer.phase, Phase::Alone);
    assert_eq!(off.pacer.allowance().depth, 8);
}

/// The kernel's reads for us (opening and planning a file), in a section
/// the counters bracket, are not an application's between ticks either.
#[test]
fn our_uncounted_sections_are_not_an_application_between_ticks() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(8, 0, 0.0);
    r.pacer.begin_uncounted();
    r.drive.add(50, 20, 0);
    r.pacer.end_uncounted();
    r.now += ALONE_LOOK;
    assert!(!r.pacer.tick(r.now));
    assert_eq!(r.pacer.phase, Phase::Alone);
    // An application's reads after it are.
    r.drive.add(20, 8, 0);
    r.now += ALONE_LOOK;
    assert!(r.pacer.tick(r.now));
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
}

/// Reads of ours split finer than we can count (a RAID's stripes) look
/// like an application between ticks; the learning that follows finds
/// none, and from then on only the regular tick looks for one (which
/// still finds an application that reads).
#[test]
fn a_learning_that_found_no_application_stops_the_looks_between_ticks() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(8, 0, 0.0);
    r.drive.add(20, 8, 0);
    r.now += ALONE_LOOK;
    assert!(r.pacer.tick(r.now));
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
    for _ in 0..4 {
        r.tick_with(0, 0, 0.0);
    }
    // Gone, not seen: one learning, not one after another while what
    // started it is recent.
    for _ in 0..10 {
        assert_eq!(r.pacer.phase, Phase::Alone, "nobody to learn");
        assert_eq!(r.pacer.allowance().depth, 8);
        r.tick_with(0, 0, 0.0);
    }
    r.drive.add(20, 8, 0);
    r.now += ALONE_LOOK;
    assert!(!r.pacer.tick(r.now));
    assert_eq!(r.pacer.phase, Phase::Alone, "no look between ticks");
    // The regular tick sees an application that reads.
    r.now += TICK;
    r.pacer.tick(r.now);
    r.tick_with(0, APP_READS, 0.4);
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
}

/// Counters that cannot be read between ticks say nothing: the look
/// finds no application (the regular tick decides), and the next look
/// that can read them sees one.
#[test]
fn unreadable_counters_between_ticks_are_no_application() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    r.tick_with(8, 0, 0.0);
    let counters = r.drive.counters.lock().unwrap().take();
    for _ in 0..3 {
        r.now += ALONE_LOOK;
        assert!(!r.pacer.tick(r.now));
        assert_eq!(r.pacer.phase, Phase::Alone, "nothing read");
        assert_eq!(r.pacer.allowance().depth, 8);
    }
    *r.drive.counters.lock().unwrap() = counters;
    r.drive.add(20, 8, 0);
    r.now += ALONE_LOOK;
    assert!(r.pacer.tick(r.now), "readable again: the application");
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
}
