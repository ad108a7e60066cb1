//! The drive's future: when its stale data will read below a floor.
//!
//! **The model.** What age costs a read is extra time per byte, `excess =
//! fresh / measured − 1`: 0 for fresh data, 9 when old data reads at a
//! tenth of fresh. Charge loss makes it grow with the data's age, and
//! over the range where it matters it grows as a power of age, `excess =
//! c · age^k`: a straight line in log–log, whose slope `k` is fitted per
//! drive (the 840 EVO-like testbed fits k ≈ 5 between 1 and 2 months; a
//! drive that ages slowly fits a small one). No constant here was tuned
//! to a device: `c` and `k` come from the drive's own samples.
//!
//! **The points.** Each sampling round measures its age buckets and a
//! fresh canary. One canary's noise would move every point of its round
//! together, so the reference is the median canary of the kept rounds
//! (in a simulation of the testbed's model at 3 % noise per read it cut
//! the spread of 6–12-day forecasts from ±36 % to ±22 %), moved toward
//! the round's own canary by the share of the canary's moves that the
//! stale reads share ([`History::references`]): a burst of load slows a
//! round's canary and its stale data alike (the sampler reads them in
//! step), and against the median it would read as age. A bucket that
//! reads measurably slower than that
//! (excess ≥ [`MIN_EXCESS`]: below that, a round's noise is as large) is
//! a point (its bytes' mean age, its excess). One round with data of two
//! ages is enough; a drive whose data is all one age gets its second
//! point from a later round, as the data ages. The rounds of the last
//! [`FIT_WINDOW`] are kept, in the state database too: a restart goes on
//! from them. A clock that steps (an RTC wrong at boot, ahead or behind)
//! sets the rounds of the clock before it aside, and they come back when
//! it is set right ([`History::add_readings`]).
//!
//! **The forecast.** Every bucket's data ages with the clock: after Δ, a
//! bucket of mean age `a` reads at `fresh / (1 + c·(a+Δ)^k)`; the buckets
//! at least `stale_after` old by then are the stale data, and their
//! byte-weighted median is judged by the same floors as a sample
//! ([`super::judge`]). The first Δ at which it is below is the forecast
//! (day by day, then bisection within the day: data turning stale can
//! lift the median, so the prediction is not monotone in Δ); none within
//! [`HORIZON_DAYS`] is said so.
//!
//! **Only what the points can tell.** The present is the round's own
//! verdict (the one `status` shows): stale data it measured below its
//! floors is below now, and where the fit puts the data below already but
//! the round measured it above, it crosses "within the hour". Beyond
//! that, a forecast needs a slope its points tell from their noise: the
//! range of slopes they allow ([`Trend`]; from fewer than
//! [`REASSURING_POINTS`] points nothing bounds it above) lies above 0.
//! "Not within the horizon" is said only if even the steepest slope of
//! the range keeps the drive above its floors (a range that holds 0, or
//! a median slope too shallow to cross within the horizon); otherwise
//! there is no forecast (see [`forecast`]): a few points warn, never
//! reassure.
//!
//! It extrapolates, and is judged on curves it was not tuned on
//! (`tools/forecast-sim.py`: the testbed's model, four other saturating
//! curves, three powers of age, one exponential; 1 % noise per read, a
//! round every 6 h, 12 days kept): on the powers of age it is unbiased
//! (+1..+2 %); a curve that levels off (the 840 EVO's does, near 10×) is
//! forecast early (−12 % on the testbed's model, −39 % on one levelling
//! off just past the floor) — a warning that comes too soon; one that
//! accelerates faster than any power of age is forecast late (+68 % on
//! the exponential): the one shape where the warning comes too late.
//! Fits with curvature (a quadratic in log–log, in a variant of that
//! simulation at the old 18 h step; the slope's trend carried to the
//! present, at 6 h) removed most of the early bias but widened the
//! spread: fewer runs within ±25 % at 1–2 % noise per read
//! (docs/DESIGN.md, "Forecast").

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::{judge, Judgement, Thresholds};
use crate::sampler::{DriveSample, MONTH};
pub use refreshd_protocol::forecast::{Forecast, HORIZON_DAYS};

/// Below this excess a bucket reads as fresh, within a round's noise.
pub const MIN_EXCESS: f64 = 0.05;
/// The rounds kept per drive: those of the last 12 days. More rounds
/// average more noise away, and let an old slope, or an old bad round,
/// linger. A span of time, not a count: the daemon samples every
/// `sample_interval` (6 h by default), re-samples a suspect drive within
/// a sixth of it, and `refreshctl now` adds rounds at will, so a count
/// would be a different span of the data's life on every host. Judged in
/// `tools/forecast-sim.py` at the daemon's default cadence (nine decay
/// shapes, independent noise per read; the share of runs with every
/// forecast 6–12 days ahead within ±25 %, at 1 % / 2 % noise): the last
/// 16 rounds (4 days) 0.54 / 0.02, 8 days 0.77 / 0.58, 12 days 0.77 /
/// 0.60, 16 days 0.77 / 0.56, 24 days 0.78 / 0.56 (40 runs per shape).
/// Longer windows turn late on the powers of age at 2 % (+19 % on
/// power-6 at 24 days; on the testbed beside `stress-ng`, 24 days, then
/// 32 rounds of the test's 18 h, came +112 % late in one suite), and on
/// the one shape forecast late, the exponential, later still (+31 % at 4
/// days, +68 % at 12, at 1 % noise). The test on the testbed
/// (`tests/forecast.rs`) samples at the same cadence. Before this was a
/// span, 16 rounds were kept: 12 days at the test's old step of 18 h, 4
/// days at the daemon's cadence.
pub const FIT_WINDOW: Duration = Duration::from_secs(12 * 86_400);
/// At most this many rounds, whatever their times (`refreshctl now` in a
/// loop): the newest are kept. 12 days at 6 h are 48, and a suspect
/// drive's re-samples add a few; the fit's pairs grow as the square (128
/// rounds of 11 age buckets: about a million slopes to sort).
pub const MAX_ROUNDS: usize = 128;
/// A round dated up to this long after a newer one is kept: a clock set
/// back by less (an NTP step of seconds) moves the data's ages by under
/// 0.2 % of a month, far inside a round's noise; set back by more, the
/// rounds after it leave the fit, set aside ([`History::add_readings`]).
pub const CLOCK_STEP_TOLERANCE: Duration = Duration::from_secs(3600);
/// Two points tell a slope when their ages differ by this factor.
pub const MIN_AGE_SPREAD: f64 = 1.02;
/// Fewer points than this bound no slope above, however their pair
/// slopes fall: with no trend at all, n points' slopes all fall together
/// by chance once in n! (once in 6 for three points, in 24 for four, in
/// 120 for five: under the 2.5 % a side of Sen's ~95 % range first at
/// five, where that range is the least and the greatest slope). A falling
/// slope from fewer gives no forecast, never "not degraded within 3
/// years" (three noisy rounds at 0.85–0.91 months on the testbed fitted
/// age^-2.2 and said so 21 days before the drive degraded, 2026-11-27).
/// Ten, not five: the forecast looks again after every round, and each
/// look is another chance for the early points to fall together (a
/// loaded testbed run said it from five falling points at 0.88 months,
/// 2026-11-27). In `tools/forecast-sim.py`, runs with a false "not within
/// the horizon" before the crossing, at 1 / 2 / 4 % noise per read (360
/// runs each): 5 / 11 / 18 from five points, 4 / 5 / 12 from six, 0 / 4 /
/// 11 from eight, 0 / 0 / 3 from ten; the forecasts judged 6–12 days
/// ahead the same (share within ±25 % 0.77 / 0.60 at 1 / 2 %). A drive
/// that does not age waits for ten points to hear so (ten rounds of data
/// of one age, fewer of several ages); a warning needs none of them.
pub const REASSURING_POINTS: usize = 10;

/// One age bucket of one round: its data's mean age and its excess.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgePoint {
    pub months: f64,
    pub excess: f64,
}

/// What one round read: when (Unix seconds), its canary, and each
/// bucket's mean age (months) and median throughput. Kept in the state
/// database too ([`History::to_json`]), so a restarted daemon goes on
/// from its rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Round {
    at: i64,
    fresh_bps: f64,
    buckets: Vec<(f64, f64)>,
}

/// A drive's last rounds.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// The rounds of the window, oldest first: the forecast's.
    rounds: VecDeque<Round>,
    /// The rounds of the clock before a step (see
    /// [`History::add_readings`]), at most [`MAX_ROUNDS`], the last set
    /// aside last: the forecast never reads them unless the clock comes
    /// back to them.
    aside: VecDeque<Round>,
}

/// `excess = exp(ln_c) · months^k`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub ln_c: f64,
    pub k: f64,
}

impl Fit {
    pub fn excess(&self, months: f64) -> f64 {
        if months <= 0.0 {
            return 0.0;
        }
        (self.ln_c + self.k * months.ln()).exp()
    }
}

/// A point, if data of `months` reading at `bps` is measurably slower
/// than `fresh_bps`.
fn point(months: f64, bps: f64, fresh_bps: f64) -> Option<AgePoint> {
    let excess = fresh_bps / bps - 1.0;
    (months > 0.0 && bps > 0.0 && excess >= MIN_EXCESS).then_some(AgePoint { months, excess })
}

impl History {
    /// Keeps a round taken at `at` (Unix seconds): its buckets' ages and
    /// throughputs, its canary.
    pub fn add(&mut self, sample: &DriveSample, fresh_bps: f64, at: i64) {
        let buckets = sample
            .buckets
            .iter()
            .filter_map(|b| Some((b.mean_months?, b.measured.median_bps()?)))
            .collect();
        self.add_readings(fresh_bps, buckets, at);
    }

    /// Keeps a round given as (months, bytes/s) per bucket, taken at
    /// `at`. Rounds [`FIT_WINDOW`] or more before it leave the fit.
    ///
    /// **A clock that steps.** A round dated more than
    /// [`CLOCK_STEP_TOLERANCE`] before a kept one (the clock stepped back),
    /// or past the window of every kept one (it jumped ahead, or the
    /// daemon was stopped that long: the two look alike), is a step: the
    /// rounds the new time cannot hold are set aside, not thrown away
    /// (their ages were counted on the clock before it), and rounds set
    /// aside at an earlier step that the new time's window holds come
    /// back. An RTC wrong at boot, ahead or behind, whose first round
    /// would have outdated 12 days of rounds, leaves them aside until NTP
    /// sets it right. Only at a step: a round the clock merely reaches
    /// later (one of a wrong clock's) never comes back.
    pub fn add_readings(&mut self, fresh_bps: f64, mut buckets: Vec<(f64, f64)>, at: i64) {
        // Nothing that is not a number (JSON has no NaN: one would lose
        // the drive's kept rounds at the next start).
        buckets.retain(|&(months, bps)| months.is_finite() && bps.is_finite());
        if !fresh_bps.is_finite() {
            return;
        }
        self.move_window(at);
        self.rounds.push_back(Round {
            at,
            fresh_bps,
            buckets,
        });
        while self.rounds.len() > MAX_ROUNDS {
            self.rounds.pop_front();
        }
        while self.aside.len() > MAX_ROUNDS {
            self.aside.pop_front();
        }
    }

    /// The window now ends at `at` (see [`History::add_readings`]).
    fn move_window(&mut self, at: i64) {
        let window = FIT_WINDOW.as_secs() as i64;
        let tolerance = CLOCK_STEP_TOLERANCE.as_secs() as i64;
        let ahead = |r: &Round| r.at > at.saturating_add(tolerance);
        let in_window = |r: &Round| r.at > at.saturating_sub(window) && !ahead(r);
        let newest = self.rounds.iter().map(|r| r.at).max();
        let jumped = newest.is_some_and(|n| at.saturating_sub(n) >= window);
        let stepped = jumped || self.rounds.iter().any(ahead);
        let (before_step, kept): (VecDeque<Round>, VecDeque<Round>) =
            self.rounds.drain(..).partition(|r| jumped || ahead(r));
        // Rounds of this clock the window passed leave for good.
        self.rounds = kept.into_iter().filter(in_window).collect();
        if stepped {
            let (back, aside): (VecDeque<Round>, VecDeque<Round>) =
                self.aside.drain(..).partition(in_window);
            self.aside = aside;
            self.aside.extend(before_step);
            self.rounds.extend(back);
            self.rounds.make_contiguous().sort_by_key(|r| r.at);
        }
    }

    /// No round kept.
    pub fn is_empty(&self) -> bool {
        self.rounds.is_empty()
    }

    /// How many rounds are kept.
    pub fn len(&self) -> usize {
        self.rounds.len()
    }

    /// The rounds set aside, then the kept ones, for the state database:
    /// one list, read back round by round ([`History::from_json`]: the
    /// step between them sets the first aside again). An older refreshd
    /// reading it drops those set aside, and its next write loses them.
    pub fn to_json(&self) -> String {
        let all: Vec<&Round> = self.aside.iter().chain(&self.rounds).collect();
        // Every value is finite (`add_readings`): this cannot fail.
        serde_json::to_string(&all).unwrap_or_default()
    }

    /// A history from the rounds kept before a restart, each added in
    /// turn under the same rules as a new one: a bound, a window, a clock
    /// that steps. Rounds the window has passed since leave the fit at the
    /// next round's [`History::add`].
    pub fn from_json(json: &str) -> Result<History, serde_json::Error> {
        let rounds: Vec<Round> = serde_json::from_str(json)?;
        let mut h = History::default();
        for r in rounds {
            h.add_readings(r.fresh_bps, r.buckets, r.at);
        }
        Ok(h)
    }

    /// The drive's fresh speed: the median canary of the kept rounds (what
    /// the forecast judges its predicted stale speed against; each round's
    /// points have their own reference, [`History::references`]).
    pub fn fresh_bps(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.rounds.iter().map(|r| r.fresh_bps).collect();
        median(&mut v)
    }

    /// Every kept round's points, each against its round's reference
    /// ([`History::references`]).
    pub fn points(&self) -> Vec<AgePoint> {
        self.rounds
            .iter()
            .zip(self.references())
            .flat_map(|(r, fresh)| {
                r.buckets
                    .iter()
                    .filter_map(move |&(months, bps)| point(months, bps, fresh))
            })
            .collect()
    }
}

/// The line through (ln age, ln excess) by Theil–Sen: the median of the
/// slopes between every two points whose ages differ by at least
/// [`MIN_AGE_SPREAD`], and the median intercept. `None` with no such pair.
///
/// Robust on purpose: a round on a busy host or an unlucky draw of
/// regions reads fast or slow, and least squares let one such round move
/// a 9-day forecast by 30–50 % on the testbed (a round at 1.35 months,
/// in three runs out of three); the medians move by a few %.
pub fn fit(points: &[AgePoint]) -> Option<Fit> {
    trend(points).map(|t| t.fit)
}

/// A fit, and the range of slopes its points allow.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub fit: Fit,
    /// About 95 % (Sen 1968): of the N sorted pair slopes, the M1-th and
    /// the (M2+1)-th, M1,2 = (N ∓ 1.96·σ)/2, σ² = n(n−1)(2n+5)/18 (the
    /// variance of Kendall's S with no trend, n points; σ counts every
    /// point though pairs closer than [`MIN_AGE_SPREAD`] give no slope,
    /// which widens the range a little). With 5 points it is the least and
    /// the greatest slope: every pair must slow down with age. With fewer
    /// than [`REASSURING_POINTS`] (two, three rounds a few hours apart of
    /// which only the first and last differ by [`MIN_AGE_SPREAD`], nine)
    /// it is their least slope up to any steeper (`f64::INFINITY`): rising
    /// slopes give a forecast (a one-round survey of two age buckets: the
    /// warning is worth giving), falling ones no forecast, never "not
    /// within the horizon" (a few noisy points say nothing of the drive's
    /// 3 years).
    pub k_range: (f64, f64),
    xs: Vec<(f64, f64)>,
}

impl Trend {
    /// The fit at the steepest slope the points allow; `None` if nothing
    /// bounds it.
    fn steepest(&self) -> Option<Fit> {
        let k = self.k_range.1;
        k.is_finite().then(|| Fit::through(&self.xs, k))?
    }
}

/// [`fit`] with its [`Trend::k_range`].
pub fn trend(points: &[AgePoint]) -> Option<Trend> {
    let xs = log_points(points);
    let spread = MIN_AGE_SPREAD.ln();
    let mut slopes: Vec<f64> = vec![];
    for (i, a) in xs.iter().enumerate() {
        for b in &xs[i + 1..] {
            let dx = b.0 - a.0;
            if dx.abs() >= spread {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    let k = median(&mut slopes)?; // sorts them
    let n = xs.len() as f64;
    let c = 1.96 * (n * (n - 1.0) * (2.0 * n + 5.0) / 18.0).sqrt();
    let last = slopes.len() - 1;
    // 0-based: the (M2+1)-th is at M2, rounded outwards; the M1-th as far
    // from the other end.
    let upper = (((slopes.len() as f64 + c) / 2.0).ceil() as usize).min(last);
    let highest = if xs.len() < REASSURING_POINTS {
        f64::INFINITY
    } else {
        slopes[upper]
    };
    let k_range = (slopes[last - upper], highest);
    Some(Trend {
        fit: Fit::through(&xs, k)?,
        k_range,
        xs,
    })
}

/// (ln age, ln excess) per point.
fn log_points(points: &[AgePoint]) -> Vec<(f64, f64)> {
    points
        .iter()
        .map(|p| (p.months.ln(), p.excess.ln()))
        .collect()
}

impl Fit {
    /// The slope `k` through (ln age, ln excess) points: the median
    /// intercept.
    fn through(xs: &[(f64, f64)], k: f64) -> Option<Fit> {
        let mut intercepts: Vec<f64> = xs.iter().map(|(x, y)| y - k * x).collect();
        Some(Fit {
            ln_c: median(&mut intercepts)?,
            k,
        })
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The stale data's predicted throughput `months` from now: the
/// byte-weighted median over the buckets that will be stale by then.
fn predicted_stale_bps(
    fit: Fit,
    mix: &[(f64, u64)],
    fresh_bps: f64,
    stale_after_months: f64,
    months: f64,
) -> Option<f64> {
    let mut v: Vec<(f64, u64)> = mix
        .iter()
        .filter(|(age, bytes)| *bytes > 0 && age + months >= stale_after_months)
        .map(|(age, bytes)| (fresh_bps / (1.0 + fit.excess(age + months)), *bytes))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = v.iter().map(|x| x.1).sum::<u64>().div_ceil(2);
    let mut seen = 0;
    v.into_iter().find_map(|(bps, bytes)| {
        seen += bytes;
        (seen >= half).then_some(bps)
    })
}

/// Whether the stale data is predicted below a floor `months` from now.
fn below_at(
    fit: Fit,
    mix: &[(f64, u64)],
    fresh_bps: f64,
    stale_after: Duration,
    th: Thresholds,
) -> impl Fn(f64) -> bool + '_ {
    let stale_after_months = stale_after.as_secs_f64() / MONTH;
    move |months: f64| {
        predicted_stale_bps(fit, mix, fresh_bps, stale_after_months, months)
            .is_some_and(|s| judge(Some(s), Some(fresh_bps), th).below())
    }
}

/// Seconds to the first moment after now that `below` holds, within the
/// horizon. Day by day: data that turns stale joins the median and may
/// lift it (the prediction is monotone only between such days), so the
/// first day below is found by walking, then refined within it. Never 0:
/// if the prediction is below already (and still at the end of the first
/// day), it is the first instant after now the bisection can tell (a
/// fraction of a second).
fn first_crossing(below: impl Fn(f64) -> bool) -> Option<f64> {
    let day = 86_400.0 / MONTH;
    let days = HORIZON_DAYS as usize;
    let first = (1..=days).find(|&d| below(d as f64 * day))?;
    let (mut lo, mut hi) = ((first - 1) as f64 * day, first as f64 * day);
    for _ in 0..30 {
        let mid = (lo + hi) / 2.0;
        if below(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi * MONTH)
}

/// The forecast for a drive after a round: its history (with this
/// round added by the caller), this round's mix of ages, and the round's
/// own verdict (`now`: what `status` and the health machine say of the
/// present; the fit speaks only of the future).
pub fn forecast(
    history: &History,
    sample: &DriveSample,
    now: &Judgement,
    stale_after: Duration,
    th: Thresholds,
) -> Option<Forecast> {
    let fresh_bps = history.fresh_bps()?;
    let points = history.points();
    let t = trend(&points)?;
    let mix: Vec<(f64, u64)> = sample
        .buckets
        .iter()
        .filter_map(|b| Some((b.mean_months?, b.bytes)))
        .filter(|&(_, bytes)| bytes > 0)
        .collect();
    if mix.is_empty() {
        return None; // no data to forecast, not "none within the horizon"
    }
    // The present is the round's: from the fit, only the future. A fit
    // that puts the data below already, where the round measured it above,
    // says it crosses within moments.
    let until = |fit: Fit| first_crossing(below_at(fit, &mix, fresh_bps, stale_after, th));
    let (lo, hi) = t.k_range;
    let seconds = if now.below() {
        // Stale data the round measured below its floors is below now,
        // whatever the slopes say of the future.
        Some(0.0)
    } else if let Some(s) = (lo > 0.0).then(|| until(t.fit)).flatten() {
        Some(s) // slowing down with age beyond the noise
    } else if hi <= 0.0 {
        None // not slowing down with age
    } else {
        // Slowing down or not, or too slowly to cross within the horizon
        // at the median slope: only if even the steepest slope the points
        // allow keeps the drive above its floors over the horizon is "not
        // within the horizon" true; else there is no forecast (not a
        // reassuring one: beside `stress-ng --cpu 4` the testbed's rounds
        // read 150–350 MB/s whatever the data's age, the median slope came
        // out ≈ 0, and "not degraded within 3 years" stood 10 days before
        // the drive degraded; in the simulator, two to four early points
        // with a shallow rising slope said it in 27 of 360 runs).
        if until(t.steepest()?).is_some() {
            return None; // no forecast
        }
        None // not within the horizon, even at the steepest
    };
    let ages = points.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
        (lo.min(p.months), hi.max(p.months))
    });
    Some(Forecast {
        seconds_until_degraded: seconds,
        exponent: t.fit.k,
        ages_months: ages,
        points: points.len(),
    })
}

mod reference;
#[cfg(test)]
mod tests;
