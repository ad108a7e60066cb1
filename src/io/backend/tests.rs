use super::uring::{tag, untag, CANCEL_TAG};
use super::*;
use std::time::Duration;

#[test]
fn tags_round_trip_and_never_collide_with_cancel() {
    for (e, b, op) in [
        (1, 0, Op::Read),
        (u32::MAX, 255, Op::Write),
        (7, 3, Op::Read),
    ] {
        assert_eq!(untag(tag(e, b, op)), (e, b, op));
        assert_ne!(tag(e, b, op), CANCEL_TAG);
    }
}

#[test]
fn ring_reports_the_epoch_of_each_request() {
    let Ok(mut ring) = UringBackend::new(BufferPool::new(2, 4096)) else {
        eprintln!("skipped: io_uring unavailable here");
        return;
    };
    let f = tempfile::tempfile().expect("temp file");
    f.set_len(8192).expect("size");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    for (epoch, buf) in [(5, 0), (6, 1)] {
        let req = Request {
            epoch,
            fd,
            buf,
            op: Op::Read,
            offset: 0,
            len: 4096,
            ioprio: 0,
        };
        // SAFETY: `f` outlives the ring's requests: both are reaped below.
        unsafe { ring.submit(req) }.expect("submit");
    }
    let mut seen = vec![];
    while let Some(c) = ring.wait(Duration::from_secs(5)).expect("wait") {
        seen.push((c.epoch, c.buf));
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![(5, 0), (6, 1)]);
    assert_eq!(ring.in_flight(), 0);
}
