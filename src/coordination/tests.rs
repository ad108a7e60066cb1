//! The slot state machine without etcd: ranking, proof by time, losing a
//! held slot (the engine is stopped), keys that vanish, release on drop.

use super::*;

fn fleet(max: usize) -> Arc<Fleet> {
    Fleet::new(Coordination {
        group: "g".into(),
        max_concurrent: max,
        ..Coordination::default()
    })
}

fn entry(device: &str) -> QueueEntry {
    QueueEntry {
        name: "h".into(),
        device: device.into(),
        since: 0,
    }
}

/// Gives the ticket a key, as the session does after its put.
fn put(t: &Ticket, key: &str) {
    record_put(&t.fleet, &t.shared, key.into());
}

/// The ticket's key in etcd, as the fleet records it.
fn key_of(t: &Ticket) -> Option<String> {
    t.fleet.lock().keys.get(&t.id).cloned()
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

#[test]
fn the_first_keys_by_revision_hold_the_slots_the_rest_wait_in_order() {
    let f = fleet(1);
    let (ca, cb) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let a = f.queue("sda", "g", ca);
    let b = f.queue("sdb", "g", cb);
    assert!(
        matches!(a.state(), SlotState::Unavailable(_)),
        "not in etcd yet"
    );
    assert!(!a.holds());
    put(&a, "/r/g/queue/1/sda");
    put(&b, "/r/g/queue/1/sdb");
    // Another host's key came first.
    let keys = ["/r/g/queue/9/sdx", "/r/g/queue/1/sda", "/r/g/queue/1/sdb"].map(String::from);
    let entries = vec![entry("sdx"), entry("sda"), entry("sdb")];
    rank(&f, "g", &keys, entries.clone(), later());
    assert_eq!(a.state(), SlotState::Waiting { ahead: 1 });
    assert_eq!(b.state(), SlotState::Waiting { ahead: 2 });
    let g = &f.reply().groups[0];
    assert_eq!(g.holders.len(), 1);
    assert_eq!(g.holders[0].device, "sdx");
    assert_eq!(g.waiting, 2);
    // The other host is done: first come, first served.
    rank(&f, "g", &keys[1..], entries[1..].to_vec(), later());
    assert!(a.holds(), "{:?}", a.state());
    assert_eq!(b.state(), SlotState::Waiting { ahead: 1 });
    assert_eq!(
        a.view().reply().state,
        crate::protocol::state::SlotState::Held
    );
}

#[test]
fn a_slot_is_held_only_while_the_lease_is_proven() {
    let f = fleet(1);
    let a = f.queue("sda", "g", Arc::default());
    put(&a, "k");
    rank(
        &f,
        "g",
        &["k".into()],
        vec![entry("sda")],
        Instant::now() + Duration::from_millis(50),
    );
    assert!(a.holds());
    std::thread::sleep(Duration::from_millis(80));
    // No keep-alive answered since: not held, whatever the state says.
    assert!(!a.holds(), "held past the proof");
    assert_eq!(
        a.view().reply().state,
        crate::protocol::state::SlotState::Unavailable
    );
}

#[test]
fn losing_the_session_stops_the_engine_of_a_held_slot_only() {
    let f = fleet(1);
    let (ca, cb) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let a = f.queue("sda", "g", ca.clone());
    let b = f.queue("sdb", "g", cb.clone());
    put(&a, "ka");
    put(&b, "kb");
    rank(
        &f,
        "g",
        &["ka".into(), "kb".into()],
        vec![entry("sda"), entry("sdb")],
        later(),
    );
    assert!(a.holds());
    f.disconnected("etcd session lost: no keep-alive answer in time");
    assert!(!a.holds());
    assert!(
        ca.load(Ordering::Relaxed),
        "the holder's engine is told to stop"
    );
    assert!(!cb.load(Ordering::Relaxed), "a waiter had nothing to stop");
    assert!(matches!(a.state(), SlotState::Unavailable(ref w) if w.contains("keep-alive")));
    assert!(key_of(&a).is_none(), "queued again in the next session");
    let r = f.reply();
    assert!(!r.connected && r.groups[0].holders.is_empty());
}

#[test]
fn a_key_that_vanished_from_etcd_is_a_lost_slot() {
    let f = fleet(2);
    let ca = Arc::new(AtomicBool::new(false));
    let a = f.queue("sda", "g", ca.clone());
    put(&a, "ka");
    rank(&f, "g", &["ka".into()], vec![entry("sda")], later());
    assert!(a.holds());
    // Deleted by hand, or its lease expired: never assume it is still ours.
    rank(&f, "g", &[], vec![], later());
    assert!(!a.holds());
    assert!(ca.load(Ordering::Relaxed));
    assert!(key_of(&a).is_none());
}

#[test]
fn dropping_a_ticket_releases_its_key() {
    let f = fleet(1);
    let a = f.queue("sda", "g", Arc::default());
    put(&a, "ka");
    let b = f.queue("sdb", "g", Arc::default());
    drop(a);
    let st = f.lock();
    assert_eq!(st.released, vec!["ka".to_string()], "to delete in etcd");
    assert_eq!(st.tickets.len(), 1);
    drop(st);
    drop(b);
    assert!(
        f.lock().released.len() == 1,
        "an unqueued ticket had no key"
    );
}

#[test]
fn groups_are_ranked_apart_and_a_refused_group_holds_nothing() {
    let f = fleet(1);
    let a = f.queue("sda", "g", Arc::default());
    let b = f.queue("sdb", "h", Arc::default());
    put(&a, "ga");
    put(&b, "hb");
    rank(&f, "g", &["ga".into()], vec![entry("sda")], later());
    rank(&f, "h", &["hb".into()], vec![entry("sdb")], later());
    assert!(a.holds() && b.holds(), "one slot in each group");
    assert_eq!(f.groups(), vec!["g".to_string(), "h".to_string()]);
    f.refuse("h", "group h has max_concurrent = 2 in etcd");
    assert!(a.holds() && !b.holds());
    let r = f.reply();
    assert!(r.groups[1]
        .error
        .as_deref()
        .is_some_and(|e| e.contains("max_concurrent")));
}

#[test]
fn a_ticket_dropped_while_its_key_is_put_leaves_no_key_behind() {
    let f = fleet(1);
    let a = f.queue("sda", "g", Arc::default());
    // The session took it to put its key …
    let taken = a.view();
    // … and the drive stopped wanting the slot meanwhile.
    drop(a);
    assert!(f.lock().released.is_empty(), "no key yet to delete");
    record_put(&f, &taken, "ka".into());
    assert_eq!(
        f.lock().released,
        vec!["ka".to_string()],
        "deleted at the next sync"
    );
    // A live ticket keeps its key.
    let b = f.queue("sdb", "g", Arc::default());
    record_put(&f, &b.view(), "kb".into());
    assert_eq!(key_of(&b).as_deref(), Some("kb"));
}

#[test]
fn every_key_put_is_a_live_tickets_or_released_whatever_the_timing() {
    // The session records puts on its thread while the drives drop their
    // tickets on theirs: every key it put ends up owned by a live ticket
    // or on the list to delete, exactly once.
    let f = fleet(1);
    const N: usize = 20_000;
    let (tx, rx) = std::sync::mpsc::channel::<Ticket>();
    let session = {
        let f = f.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                let t = f.queue(&format!("d{i}"), "g", Arc::default());
                let shared = t.view();
                tx.send(t).unwrap();
                record_put(&f, &shared, format!("k{i}"));
            }
        })
    };
    let drives = std::thread::spawn(move || {
        let mut kept = vec![];
        for (i, t) in rx.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(t);
            } else {
                kept.push(t);
            }
        }
        kept
    });
    session.join().unwrap();
    let kept = drives.join().unwrap();
    let st = f.lock();
    let mut owned: Vec<&String> = st.keys.values().chain(st.released.iter()).collect();
    owned.sort();
    owned.dedup();
    assert_eq!(st.keys.len() + st.released.len(), N, "a key lost or twice");
    assert_eq!(owned.len(), N, "no key lost");
    assert_eq!(st.keys.len(), kept.len(), "the live tickets' keys");
    drop(st);
    drop(kept);
    assert_eq!(f.lock().released.len(), N);
}

#[test]
fn a_key_put_again_for_a_new_ticket_is_not_deleted_after_the_put() {
    // Keys are named by lease and device: a drive that gave its slot back
    // and queued again between two syncs has its old key on the list to
    // delete and the same key to put for the new ticket.
    let f = fleet(1);
    let old = f.queue("sda", "g", Arc::default());
    put(&old, "l/sda");
    drop(old);
    let new = f.queue("sda", "g", Arc::default());
    assert!(take_released(&f, "l/sda"), "deleted before the put");
    assert!(f.lock().released.is_empty(), "and never after it");
    put(&new, "l/sda");
    assert_eq!(key_of(&new).as_deref(), Some("l/sda"));
    assert!(!take_released(&f, "l/sda"), "nothing to delete first");
}
