//! The floor as a promise kept over time: the time spent learning and
//! the depth a slow drive needs are made up for, whatever the
//! application's latency says.

use super::*;

/// A drive on which each request of ours in flight reads `per_request`
/// bytes a second, and an engine that reads what the allowance lets it:
/// its rate, at most `depth` requests in flight, in requests of its size
/// (one is in flight while the next request's bytes come in).
struct SlowDrive {
    per_request: f64,
    /// Bytes of the request in flight read so far.
    carry: f64,
    in_flight: bool,
    read: u64,
}

impl SlowDrive {
    fn new(per_request: u64) -> SlowDrive {
        SlowDrive {
            per_request: per_request as f64,
            carry: 0.0,
            in_flight: false,
            read: 0,
        }
    }

    /// One tick beside an application doing [`APP_READS`] of `app_ms`.
    fn tick(&mut self, r: &mut Rig, app_ms: f64) {
        let a = r.pacer.allowance();
        let own = r.pacer.own().clone();
        if a.depth == 0 {
            // Silent: the request in flight is left (its bytes with it).
            if std::mem::take(&mut self.in_flight) {
                own.read_ended();
            }
            self.carry = 0.0;
        } else if !self.in_flight {
            own.read_started();
            self.in_flight = true;
        }
        let request = a.request.unwrap_or(512 << 10);
        let tick = TICK.as_secs_f64();
        self.carry += (a.depth as f64 * self.per_request * tick).min(a.rate.unwrap() as f64 * tick);
        let latency = Duration::from_secs_f64(request as f64 / self.per_request);
        let mut done = 0;
        while self.carry >= request as f64 {
            self.carry -= request as f64;
            own.read_done(request, latency, false);
            own.read_ended();
            own.read_started();
            self.read += request;
            done += 1;
        }
        let own_ms = done * latency.as_millis() as u64;
        r.drive.add(
            done + APP_READS,
            own_ms + (APP_READS as f64 * app_ms).round() as u64,
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

fn mib_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / MIB as f64 / d.as_secs_f64()
}

/// An application that suffers whatever the refresh does (10× its
/// latency alone): the refresh reads the floor, counted from the
/// application's first read, learning's silence included.
#[test]
fn the_time_spent_learning_is_made_up() {
    let d = Duration::from_secs(10);
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB));
    let mut drive = SlowDrive::new(100 * MIB);
    // The first tick the application reads: learning starts.
    drive.tick(&mut r, 0.4);
    assert!(matches!(r.pacer.phase, Phase::Learning { .. }));
    let start = r.now - TICK;
    let learning = drive.run(&mut r, LEARN, 0.4);
    assert_eq!(learning, 0, "silent while learning");
    let sharing = drive.run(&mut r, TICK, 4.0);
    r.shows("MiB behind its 4.0 MiB/s floor, making it up");
    let sharing = sharing + drive.run(&mut r, d - LEARN - 2 * TICK, 4.0);
    let got = mib_per_s(learning + sharing, r.now - start);
    assert!(
        got >= FLOOR as f64 / MIB as f64 * 0.98,
        "{got:.2} MiB/s over {:?} from the application's first read: under the floor",
        r.now - start
    );
    // Made up, not run ahead of: the floor is not a rate to exceed.
    assert!(got <= FLOOR as f64 / MIB as f64 * 1.1, "{got:.2} MiB/s");
}

/// A drive on which one request of ours in flight reads 1.25 MiB/s (an
/// aged one, re-reading), beside an application just over the aim: the
/// floor needs four requests in flight, and the controller's cut to one
/// does not take them away.
#[test]
fn the_depth_the_floor_needs_is_kept_while_the_application_is_over_the_aim() {
    let mut r = Rig::new(YieldMode::Auto, Some(50 * MIB)).shared_with(1.0);
    let mut drive = SlowDrive::new(5 * MIB / 4);
    // Over the aim (1.12×) but not by much: the rate is at the floor.
    drive.run(&mut r, Duration::from_secs(5), 1.12);
    let d = Duration::from_secs(5);
    let got = mib_per_s(drive.run(&mut r, d, 1.12), d);
    assert!(
        got >= FLOOR as f64 / MIB as f64 * 0.98,
        "{got:.2} MiB/s at depth {}: under the floor",
        r.pacer.allowance().depth
    );
}
