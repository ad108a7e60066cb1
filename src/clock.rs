//! Time, in one place: the wall clock, timestamps exactly as the kernel
//! gives them, and what to believe of a timestamp from the future.
//!
//! Timestamps are (seconds, nanoseconds), never a product that overflows:
//! `statx` returns any i64 second, and i64 nanoseconds end in 2262 (an
//! mtime of 2300-01-01 once became 1901-12-13 in the recovery journal).
//!
//! A clock can be wrong: a host booted with a bad RTC, a test, a VM
//! restored from a snapshot. A timestamp more than [`FUTURE_TOLERANCE`]
//! after now was made by a clock that was wrong, and says nothing about
//! when the data was written: it is treated as unknown (so the data is
//! due), never as "just written" (which would exempt the data until the
//! wrong date comes).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// How far in the future a timestamp may be before it counts as made by a
/// wrong clock (clock steps of NTP, skew between hosts of a fleet).
pub const FUTURE_TOLERANCE: i64 = 3600;

/// A point in time as the kernel gives it: seconds since the epoch (any
/// i64, before 1970 too) and nanoseconds in 0..1e9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

impl Ord for Timestamp {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.sec, self.nsec).cmp(&(o.sec, o.nsec))
    }
}

impl PartialOrd for Timestamp {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Timestamp {
    pub const fn new(sec: i64, nsec: u32) -> Timestamp {
        Timestamp { sec, nsec }
    }

    pub fn from_statx(t: rustix::fs::StatxTimestamp) -> Timestamp {
        Timestamp::new(t.tv_sec, t.tv_nsec.min(999_999_999))
    }

    /// From `stat`'s (seconds, nanoseconds) pair.
    pub fn from_stat(sec: i64, nsec: u64) -> Timestamp {
        Timestamp::new(
            sec,
            u32::try_from(nsec).unwrap_or(999_999_999).min(999_999_999),
        )
    }

    pub fn to_timespec(self) -> rustix::fs::Timespec {
        rustix::fs::Timespec {
            tv_sec: self.sec,
            tv_nsec: self.nsec.into(),
        }
    }

    /// Nanoseconds since the epoch, where an i64 holds them (1677–2262).
    pub fn checked_nanos(self) -> Option<i64> {
        self.sec
            .checked_mul(1_000_000_000)?
            .checked_add(i64::from(self.nsec))
    }

    /// From nanoseconds since the epoch (a format that used them).
    pub fn from_nanos(n: i64) -> Timestamp {
        Timestamp::new(
            n.div_euclid(1_000_000_000),
            n.rem_euclid(1_000_000_000) as u32,
        )
    }
}

/// Seconds since the epoch, now (before 1970: negative; a clock that
/// cannot be read: 0).
pub fn now_secs() -> i64 {
    let now = std::time::SystemTime::now();
    match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// `t` (seconds), unless a wrong clock made it: `None` when it is more
/// than [`FUTURE_TOLERANCE`] after `now`.
pub fn believable(t: i64, now: i64) -> Option<i64> {
    (t <= now.saturating_add(FUTURE_TOLERANCE)).then_some(t)
}

/// The local time of day, in minutes after midnight (maintenance windows).
/// The age of a file's data at `now`: since the later of its mtime and
/// its last refresh, never negative; a time from a wrong clock (in the
/// future) is not believed, and unknown is the oldest there is. The one
/// definition of staleness: the inventory, the plan, the survey and the
/// one-shot's `--stale-after` all use it.
pub fn data_age(mtime: i64, last_refresh: Option<i64>, now: i64) -> std::time::Duration {
    let m = believable(mtime, now);
    let r = last_refresh.and_then(|r| believable(r, now));
    match m.max(r) {
        Some(t) => {
            std::time::Duration::from_secs(u64::try_from(now.saturating_sub(t)).unwrap_or(0))
        }
        None => std::time::Duration::MAX,
    }
}

pub fn local_minute() -> u16 {
    // SAFETY: localtime_r with valid pointers; time(NULL) cannot fail.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        (tm.tm_hour * 60 + tm.tm_min) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_cover_every_second_statx_can_return() {
        // 2300-01-01 and 1901-12-13: beyond i64 nanoseconds both ways.
        let far = Timestamp::new(10_413_792_000, 5);
        assert_eq!(far.checked_nanos(), None);
        assert!(far > Timestamp::new(10_413_792_000, 4));
        let before_1970 = Timestamp::new(-2_147_483_648, 0);
        assert!(before_1970 < Timestamp::new(0, 0));
        assert_eq!(
            before_1970.checked_nanos(),
            Some(-2_147_483_648_000_000_000)
        );
        assert_eq!(Timestamp::from_nanos(-1), Timestamp::new(-1, 999_999_999));
        let back = Timestamp::from_nanos(far.sec.min(9_000_000_000) * 1_000_000_000 + 7);
        assert_eq!(back.nsec, 7);
        let json = serde_json::to_string(&far).unwrap_or_default();
        assert_eq!(json, r#"{"sec":10413792000,"nsec":5}"#);
    }

    #[test]
    fn a_timestamp_from_a_wrong_clock_is_not_believed() {
        let now = 1_800_000_000;
        assert_eq!(believable(now - 86_400, now), Some(now - 86_400));
        assert_eq!(believable(now + 60, now), Some(now + 60), "clock skew");
        assert_eq!(
            believable(now + 40 * 31_557_600, now),
            None,
            "40 years ahead"
        );
        assert_eq!(believable(i64::MAX, i64::MAX), Some(i64::MAX));
    }
}
