use super::*;

#[test]
fn the_daily_budget_is_spent_within_a_day_and_renewed_the_next() {
    let mut b = DailyBudget::default();
    let day = 20_000 * 86_400; // some midnight, UTC
    assert_eq!(b.left(day + 10, Some(ByteSize(100))), Some(100));
    b.spend(day + 10, 60);
    b.spend(day + 3600, 40);
    assert_eq!(
        b.left(day + 86_399, Some(ByteSize(100))),
        Some(0),
        "spent today"
    );
    assert_eq!(
        b.left(day + 86_400, Some(ByteSize(100))),
        Some(100),
        "a new day"
    );
    b.spend(day + 86_400 + 5, 30);
    assert_eq!(b.left(day + 86_400 + 6, Some(ByteSize(100))), Some(70));
    assert_eq!(b.left(day, None), None, "no budget: unlimited");
}

#[test]
fn permits_bound_active_drives_and_come_back_on_drop() {
    let p = Permits::default();
    let never = || false;
    let a = p.acquire(2, &never);
    let b = p.acquire(2, &never);
    assert!(a.is_some() && b.is_some());
    assert_eq!(p.active(), 2);
    // A third waits; giving up (stop) returns nothing.
    let stop = || true;
    assert!(p.acquire(2, &stop).is_none());
    drop(a);
    assert_eq!(p.active(), 1);
    let c = p.acquire(2, &never);
    assert!(c.is_some());
    drop((b, c));
    assert_eq!(p.active(), 0, "every permit back, on every path");
}

#[test]
fn a_waiting_drive_gets_the_permit_released_by_another() {
    let p = std::sync::Arc::new(Permits::default());
    let held = p.acquire(1, &|| false);
    let p2 = p.clone();
    let waiter = std::thread::spawn(move || p2.acquire(1, &|| false).is_some());
    std::thread::sleep(Duration::from_millis(100));
    drop(held);
    assert!(waiter.join().unwrap_or(false));
}
