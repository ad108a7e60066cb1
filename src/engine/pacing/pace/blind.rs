//! Without the drive's counters (a device sysfs does not describe), the
//! application cannot be seen: the refresh keeps its configured rate and
//! watches only its own reads. When they take more than [`QUEUED`] times
//! a read that had the drive to itself, they queue behind each other (a
//! rate above what the drive reads): the depth halves. Back within
//! [`ROOM`] times, it grows by one. A saturated queue is what makes an
//! application wait, whether or not it can be seen.

use std::time::Duration;

use crate::io::account::OwnDone;

/// Own reads slower than this many times the idle read: a queue.
const QUEUED: f64 = 2.0;
/// Own reads within this many times the idle read: room for one more.
const ROOM: f64 = 1.3;

#[derive(Debug)]
pub struct Blind {
    max: usize,
    depth: usize,
    /// Latency of a read of this length that had the drive to itself.
    alone: Option<(u64, Duration)>,
}

impl Blind {
    pub fn new(max: usize) -> Blind {
        Blind {
            max: max.max(1),
            depth: max.max(1),
            alone: None,
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Takes a tick's completions.
    pub fn look(&mut self, own: &OwnDone) {
        for &(len, lat, alone) in &own.reads {
            if alone {
                self.alone = Some(match self.alone {
                    Some((l, best)) if l == len => (len, best.min(lat)),
                    _ => (len, lat),
                });
            }
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
        } else if median <= ROOM * idle && self.depth < self.max {
            self.depth += 1;
        }
    }
}
