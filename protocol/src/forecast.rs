//! When a drive's stale data will read below its floors, at the rate it
//! has been slowing down (`refreshctl status`, `refreshd survey`, the
//! metric `refreshd_drive_seconds_until_degraded`).

use serde::{Deserialize, Serialize};

/// How far ahead a forecast looks.
pub const HORIZON_DAYS: f64 = 3.0 * 365.0;

/// A forecast from a drive's age-vs-speed samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// Seconds from the sample until its stale data reads below a floor
    /// (0: it already does); `None`: not within [`HORIZON_DAYS`].
    pub seconds_until_degraded: Option<f64>,
    /// The fitted growth: extra read time per byte ∝ age^exponent.
    pub exponent: f64,
    /// The youngest and oldest data age (months) the fit rests on.
    pub ages_months: (f64, f64),
    /// Measurements (age buckets × sampling rounds) it rests on.
    pub points: usize,
}

impl Forecast {
    /// "degraded in ~23 days", "degraded within the hour", "below its
    /// floors now", "not degraded within 3 years".
    pub fn words(&self) -> String {
        match self.seconds_until_degraded {
            None => format!("not degraded within {:.0} years", HORIZON_DAYS / 365.0),
            Some(s) if s <= 0.0 => "below its floors now".into(),
            Some(s) if s < 3600.0 => "degraded within the hour".into(),
            Some(s) => format!("degraded in ~{}", span(s)),
        }
    }

    /// What it rests on, for `--json` readers and the verbose status.
    pub fn basis(&self) -> String {
        format!(
            "extra read time ∝ age^{:.1}, from {} measurements of data {:.1}–{:.1} months old",
            self.exponent, self.points, self.ages_months.0, self.ages_months.1
        )
    }
}

fn span(seconds: f64) -> String {
    let days = seconds / 86_400.0;
    if days < 2.0 {
        format!("{:.0} hours", seconds / 3600.0)
    } else if days < 90.0 {
        format!("{days:.0} days")
    } else {
        format!("{:.0} months", days / 30.44)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: Option<f64>) -> String {
        Forecast {
            seconds_until_degraded: s,
            exponent: 5.0,
            ages_months: (1.0, 2.0),
            points: 4,
        }
        .words()
    }

    #[test]
    fn words_for_each_span() {
        assert_eq!(at(None), "not degraded within 3 years");
        assert_eq!(at(Some(0.0)), "below its floors now");
        assert_eq!(at(Some(0.001)), "degraded within the hour");
        assert_eq!(at(Some(5.0 * 3600.0)), "degraded in ~5 hours");
        assert_eq!(at(Some(23.0 * 86_400.0)), "degraded in ~23 days");
        assert_eq!(at(Some(300.0 * 86_400.0)), "degraded in ~10 months");
    }
}
