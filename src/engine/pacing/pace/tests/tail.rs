//! The application's p99 at the drive, shown beside its mean where its
//! reads are timed one by one.

use super::*;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn the_p99_at_the_drive_is_learned_alone_and_shown_against_it() {
    let drive = FakeDrive::default();
    drive.read_for(300, us(60));
    let mut r = Rig::on(drive.clone(), YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    r.app_for(DECIDE, 1, 0.4);
    // Alone and beside us alike: 1.00× (the same bucket).
    r.shows("; p99 at the drive 1.00× its 0.061 ms alone");
    // Its tail grows where its mean does not: 150 µs a read, 2.5×
    // (bucket bounds: 152 units over 60).
    drive.read_for(300, us(150));
    r.app_for(DECIDE, 1, 0.4);
    r.shows("; p99 at the drive 2.53× its 0.061 ms alone");
    r.shows("0.40 ms per read, 1.00× its 0.40 ms alone");
    // Shown, not steered on: the mean decides, and it grew.
    let mut rates = vec![r.rate()];
    for _ in 0..4 {
        r.app_for(DECIDE, 1, 0.4);
        rates.push(r.rate());
    }
    assert!(rates.windows(2).all(|w| w[1] >= w[0]), "{rates:?}");
}

#[test]
fn no_p99_without_enough_reads_timed_or_with_ours_counted_as_the_applications() {
    // Too few reads while learning to say a p99 (30; a p99 needs
    // `tail::MIN_READS`): none shown.
    let drive = FakeDrive::default();
    drive.read_for(30, us(60));
    let mut r = Rig::on(drive.clone(), YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    drive.read_for(300, us(60));
    r.app_for(DECIDE * 2, 1, 0.4);
    let y = r.pacer.status().yielding().unwrap();
    assert!(!y.reason.contains("p99"), "{}", y.reason);
    // Not timed at all: the mean alone, as before.
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(0.4);
    r.app_for(DECIDE * 2, 1, 0.4);
    let y = r.pacer.status().yielding().unwrap();
    assert!(!y.reason.contains("p99"), "{}", y.reason);
    // Our reads at the application's priority (`io_priority =
    // "inherit"`): the timing would count them as its own.
    let drive = FakeDrive::default();
    drive.read_for(300, us(60));
    let mut r = Rig::on(drive.clone(), YieldMode::Auto, Some(50 * MIB));
    r.pacer.cfg.priority = IoPriority::Inherit;
    let mut r = r.shared_with(0.4);
    r.app_for(DECIDE * 2, 1, 0.4);
    let y = r.pacer.status().yielding().unwrap();
    assert!(!y.reason.contains("p99"), "{}", y.reason);
}
