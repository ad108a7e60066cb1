//! The pacer's control: a tick's step through learning the application's
//! latency alone, deciding the rate from what it reads with the refresh
//! beside it, keeping the floor, and what the operator is shown (see the
//! parent module for the law).

use std::time::Duration;

use super::{
    latency, tail, DepthTrial, Pacer, Phase, Yielding, AIM, DECIDE, DEPTH_COST, GROWTH,
    GROWTH_FROM_THE_FLOOR, GROWTH_MARK, LEARN, MAX_REQUEST, MIN_REQUEST, PAUSE, PAUSE_GAPS, QUIET,
    RELEARN, RELEARN_SOON, REQUEST_TIME, TAIL_SHARE, TICK,
};
use crate::io::account::OwnDone;

impl Pacer {
    pub(super) fn step(
        &mut self,
        now: Duration,
        tick: Option<latency::TickReads>,
        own: &OwnDone,
        elapsed: Duration,
    ) {
        let app_active = self.app_seen.is_some_and(|t| now.saturating_sub(t) < QUIET);
        // What the throttle held the tick just ended to: set at its start.
        let held = (self.sharing_rate(), self.floor_now());
        self.account_for_the_floor(elapsed, own);
        match self.phase {
            Phase::Alone if app_active => self.start_learning(now),
            Phase::Alone => {}
            Phase::Learning {
                until,
                primed,
                quiet,
            } => self.learn(now, until, primed, quiet, tick),
            Phase::Sharing if !app_active => {
                tracing::info!("the application stopped reading: back to the configured rate");
                self.leave_sharing();
            }
            // Not in a pause: there would be nothing to learn.
            Phase::Sharing
                if !self.paused
                    && self
                        .baseline
                        .is_none_or(|(_, at)| now >= at + self.relearn_after()) =>
            {
                self.start_learning(now)
            }
            Phase::Sharing => self.share(now, elapsed, own, held),
        }
        self.set_read_ioprio();
    }

    /// How long after a learning the next comes: sooner while the tail's
    /// pool of learnings is young.
    fn relearn_after(&self) -> Duration {
        if self.tail.young() {
            RELEARN_SOON
        } else {
            RELEARN
        }
    }

    /// Every tick beside the application (learning or sharing, in its
    /// pauses too) is owed to the floor; what was read pays. The time
    /// our engine spends between files is owed too: the promise is the
    /// refresh's progress, and [`super::floor`]'s cap bounds what a stall
    /// of its own can ask back. Nothing is owed where nothing could be
    /// paid back: a configured rate at or below the floor is the floor.
    fn account_for_the_floor(&mut self, elapsed: Duration, own: &OwnDone) {
        if self.phase != Phase::Alone && self.full() > self.floor() as f64 {
            let read = own.read_bytes();
            self.floor_account
                .account(self.floor() as f64, elapsed, read);
        }
    }

    /// Sharing: the application's pauses are the refresh's; while it
    /// reads, the controller's rate and depth.
    /// `held`: the rate and the promise (the floor and what was owed)
    /// over the tick just ended.
    fn share(&mut self, now: Duration, elapsed: Duration, own: &OwnDone, held: (f64, f64)) {
        let quiet = self
            .app_seen
            .map_or(Duration::ZERO, |t| now.saturating_sub(t));
        let was_paused = self.paused;
        self.paused = quiet >= PAUSE.max(self.app_gap * PAUSE_GAPS);
        if self.paused {
            self.span = Default::default();
            if !was_paused {
                // Not yielding while it pauses: the configured rate.
                tracing::debug!(
                    quiet_ms = quiet.as_millis() as u64,
                    "the application pauses"
                );
                self.status.set(None);
            }
            return;
        }
        if was_paused {
            self.resume(now);
        }
        // The tick just ended paid the floor back above the controller's
        // rate: its window is not the rate's (see [`tail`]).
        self.window_paid_back |= held.1 > self.rate;
        self.grow_depth(now, elapsed, own, held);
        if now >= self.decided + DECIDE {
            self.decide(now);
        }
    }

    /// The application reads again after a pause: the window starts now
    /// (the time we ran at the configured rate in is not the
    /// controller's to judge), and a depth on trial goes back untried.
    pub(super) fn resume(&mut self, now: Duration) {
        tracing::debug!("the application reads again");
        self.paused = false;
        self.reads.restart();
        self.decided = now;
        self.last_ratio = None;
        if let Some(t) = self.depth_trial.take() {
            self.depth = t.before;
        }
        self.forget_rate_trial(true);
        let counts = self.read_times();
        self.tail.restart(counts, true);
        self.show(None);
    }

    pub(super) fn start_learning(&mut self, now: Duration) {
        self.phase = Phase::Learning {
            until: now + LEARN,
            primed: false,
            quiet: false,
        };
        self.paused = false;
        self.forget_depth_trials();
        self.floor_account.forget_depth();
        self.span = Default::default();
        self.learned = (0, 0.0);
        self.reads.restart();
        // Its tail is counted from the tick the mean starts counting.
        self.tail.start_learning(None);
    }

    /// Silent: the application's reads now are its latency alone. The
    /// ticks until nothing of ours is in flight, reads or writes, and the
    /// first after (it saw our last requests complete), are skipped,
    /// whenever they come (a tick is a turn of the executor at or after
    /// [`TICK`], rarely on the dot), and so is any tick that began with
    /// ours in flight; [`LEARN`] counts from the tick before the first
    /// counted, as it would with the first tick skipped and nothing of
    /// ours in flight. (Primed once our reads alone were done, it learned
    /// beside our last writes through the ring, which hold a channel as
    /// a read does.) `until`, `primed`, `quiet`: the phase's.
    fn learn(
        &mut self,
        now: Duration,
        until: Duration,
        primed: bool,
        quiet: bool,
        tick: Option<latency::TickReads>,
    ) {
        let quiet_now = self.own.requests_in_flight() == 0;
        if !primed {
            // Waited for at most [`LEARN`]: a request that never ends (a
            // stalled drive) must not keep the refresh silent for good.
            if !quiet_now && now < until {
                return;
            }
            self.phase = Phase::Learning {
                until: until.max(now + LEARN - TICK),
                primed: true,
                quiet: quiet_now,
            };
            let counts = self.read_times();
            self.tail.start_learning(counts);
            return;
        }
        self.phase = Phase::Learning {
            until,
            primed,
            quiet: quiet_now,
        };
        // Counted only if nothing of ours was in flight at either end.
        if let Some(t) = tick.filter(|_| quiet && quiet_now) {
            self.learned.0 += t.reads.max(0) as u64;
            self.learned.1 += t.ms.max(0.0);
        }
        if now < until {
            return;
        }
        let (reads, ms) = self.learned;
        let mut changed = false;
        if reads >= latency::MIN_READS {
            let alone = ms / reads as f64;
            // Judged on as many reads as a p99 needs: a mean of a few
            // dozen moves by a quarter by chance.
            changed = reads >= tail::MIN_READS
                && self.baseline.is_some_and(|(before, _)| {
                    let moved = alone / before.max(1e-6);
                    !(1.0 / tail::CHANGED..=tail::CHANGED).contains(&moved)
                });
            self.baseline = Some((alone, now));
            tracing::debug!(alone_ms = alone, reads, "learned the application's latency");
        } else if let Some((b, _)) = self.baseline {
            // Too few reads to say: keep the old one a while longer.
            self.baseline = Some((b, now));
        }
        if self.baseline.is_none() {
            // The application is too quiet to measure: treat it as gone
            // (not seen: the next tick would learn again, for as long as
            // what it saw was recent), and leave it to the regular tick
            // to see one (what started this may have been reads of ours
            // the drive split finer than we can count).
            self.app_seen = None;
            self.alone_looks = false;
            self.leave_sharing();
            return;
        }
        if self.status.yielding().is_none() {
            tracing::info!("sharing the drive with the application");
        }
        self.phase = Phase::Sharing;
        self.decided = now;
        self.count_app_reads(self.reads.reads_per_sec(TICK));
        self.reads.restart();
        let counts = self.read_times();
        self.tail.learned(counts, changed);
        self.show(None);
    }

    /// The control law (see the module's documentation).
    fn decide(&mut self, now: Duration) {
        self.decided = now;
        let (Some(app), Some((alone, _))) = (self.reads.latency_ms(), self.baseline) else {
            return;
        };
        let ratio = app / alone.max(0.001);
        let counts = self.read_times();
        // The rate the window ran at: the controller's, unless the floor
        // was paid back above it at any tick of it.
        let paid_back = std::mem::take(&mut self.window_paid_back);
        let ran_at =
            (!paid_back && self.floor_now() <= self.rate).then(|| self.rate.min(self.full()));
        let tail = self.tail.decide(counts, ran_at);
        self.tail.rise(DECIDE, self.full());
        let says = self.tail.says();
        let costly = says != tail::Says::Within;
        self.judge_depth_trial(ratio, costly, now);
        let went_back = self.judge_rate_trial(ratio, costly, now);
        let floor = self.floor() as f64;
        self.count_app_reads(self.reads.reads_per_sec(TICK));
        if went_back {
            // Back to a rate whose latency was within the aim; the tail's
            // cut, if it says one, all the same.
            if says.cuts() {
                self.cut(1.0, says);
            }
        } else if ratio > AIM || says.cuts() {
            // In proportion to the mean over its aim, at most halved.
            self.cut((AIM / ratio).clamp(0.5, 1.0), says);
        } else if costly {
            // The mean would let it grow; the tail does not.
        } else if ratio < GROWTH_MARK {
            let step = if self.slow_start {
                GROWTH_FROM_THE_FLOOR
            } else {
                GROWTH
            };
            self.rate = self.grown(self.rate, step).max(self.rate).min(self.full());
        } else if now >= self.trials_from {
            self.try_more_rate(ratio);
        }
        // Noticed (a costly depth was judged just before): for good.
        self.slow_start &= ratio < GROWTH_MARK && !costly;
        self.rate = self.rate.max(floor);
        tracing::debug!(
            app_ms = app,
            alone_ms = alone,
            ratio,
            tail_ratio = tail,
            tail_says = ?says,
            rate_mib = self.rate / f64::from(1 << 20),
            depth = self.sharing_depth(),
            "pacer decided"
        );
        self.reads.restart();
        self.show(Some((app, alone)));
    }

    /// The rate cut `by_mean`, and at least to what the tail's say cuts
    /// ([`tail`]), after which the rate grows no further than the tail's
    /// cut; one request in flight, or what the floor needs (kept by
    /// `sharing_depth`).
    fn cut(&mut self, by_mean: f64, says: tail::Says) {
        let by_tail = says.rate_after(self.rate);
        self.rate = (self.rate * by_mean).min(by_tail);
        if says.cuts() {
            self.tail.cut_to(by_tail, self.floor() as f64);
        }
        self.depth = 1;
    }

    /// `from` grown by `step`: within the configured rate, and no
    /// further than half again what the refresh reads (room for a depth
    /// trial to find more: it starts below 0.8 of the rate). A rate it
    /// does not read is no evidence the application would not notice it,
    /// and with no configured rate it grew without bound (past 2^64
    /// bytes/s in 70 s of an unhurt application; cut at most by half a
    /// decision, it would then take 30 s to come down). Nor past the
    /// ceiling a cut on the application's tail set ([`tail`]). Both
    /// growth and a rate on trial ([`super::rate_trial`]) take this.
    pub(super) fn grown(&self, from: f64, step: f64) -> f64 {
        let reads = self.reads.own_per_sec(TICK);
        let ceiling = self.tail.ceiling().unwrap_or(f64::INFINITY);
        (from * step).min(reads * 1.5).min(self.full()).min(ceiling)
    }

    /// The request size while sharing: few enough requests that the
    /// application's tail does not see them, and no more than a fixed
    /// rate sends.
    ///
    /// A read of the application that comes while one of our requests
    /// holds its channel waits for it: one wait per request of ours,
    /// however large (a reader at queue depth 1 has one read to delay; it
    /// sends no other until that one is served). Its p99 goes over the
    /// target once more than 1 % of its reads wait, whatever the wait;
    /// its mean pays for the time we hold the drive, which the rate
    /// bounds whatever the size. So a request carries 2 · rate /
    /// ([`TAIL_SHARE`] · the application's reads per second) bytes (each
    /// is read, then written: two requests), at least [`REQUEST_TIME`] of
    /// the rate, 64 KiB to 1 MiB, at most what the drive takes in one
    /// (512 KiB on the testbed: there a reader below ~3,200 reads/s at
    /// 4 MiB/s gets that, and more of ours than the share). Measured on
    /// the testbed, one channel, a reader at QD1 doing 2,500 reads/s, one
    /// run each: requests of 64 KiB (200 of ours a second, 8 % of its
    /// reads) put its p99 at 6.2× alone at 6.2 MiB/s; of 512 KiB (~24 a
    /// second, 1 %), 1.15× at 6.1 MiB/s (docs/benchmarks.md).
    ///
    /// Not for a reader with many reads queued on each channel: one
    /// request of ours delays every read queued behind it, for as long
    /// as it lasts. In the matrix a QD8 reader's p99 improved on one and
    /// two channels with this rule and got worse on four and eight,
    /// behind a link cap and with fade (docs/benchmarks.md).
    ///
    /// Derived from the rate each time it is asked for, not stored: the
    /// rate moves between decisions (what is owed to the floor is paid
    /// back tick by tick), and a size set for another rate would send
    /// more requests than the share.
    pub(super) fn sharing_request(&self) -> u64 {
        let rate = self.sharing_rate();
        let for_tail = if self.app_reads_per_s > 0.0 {
            2.0 * rate / (TAIL_SHARE * self.app_reads_per_s)
        } else {
            MAX_REQUEST as f64
        };
        let largest = self.largest_request();
        // Bounded before the cast: with no configured rate and an
        // application too quiet to count, nothing bounds the rate.
        let request = for_tail.max(rate * REQUEST_TIME).min(largest as f64) as u64;
        (request.div_ceil(4096) * 4096).clamp(MIN_REQUEST.min(largest), largest)
    }

    /// The application's reads per second now, for the request size
    /// (`None`: too few to say; the last count stands).
    pub(super) fn count_app_reads(&mut self, app_reads_per_s: Option<f64>) {
        if let Some(a) = app_reads_per_s {
            self.app_reads_per_s = a;
        }
    }

    /// The largest request while sharing: 1 MiB, and never more than the
    /// drive takes in one (`max_io`). The block layer splits a larger one
    /// into pieces the drive may serve one after the other, and the
    /// counters then take each piece's time as ours for the whole
    /// request's: the application's latency reads low, and the rate
    /// grows past the aim. Measured on the testbed (`max_io` 512 KiB), 4
    /// channels, a QD1 reader, 1 MiB requests: the reader's mean went to
    /// 1.43× alone, its p99 to 4.65×, while the rate grew (one run; the
    /// cause is inferred from the accounting, not logged).
    fn largest_request(&self) -> u64 {
        let max_io = self.device.as_ref().map_or(MAX_REQUEST, |d| d.max_io());
        (max_io / 4096 * 4096).clamp(4096, MAX_REQUEST)
    }

    /// Sharing: if the rate's bytes are not read (one request at a time is
    /// too few for an aged drive), one more in flight, on trial (see
    /// [`Pacer::judge_depth_trial`]); and the floor is kept whatever the
    /// latency says.
    fn grow_depth(&mut self, now: Duration, elapsed: Duration, own: &OwnDone, held: (f64, f64)) {
        if own.reads.is_empty() && self.own.reads_in_flight() == 0 {
            return;
        }
        if elapsed > 2 * TICK {
            // A tick that spans the engine's time between files (nothing
            // ticks while it syncs one and opens the next): the throttle
            // let bytes through that nobody asked for, no evidence of
            // depth (a fast drive went to depth 8 on it; unit test). The
            // span starts again after it: left out of one, the requests
            // it ended (begun in the span) would split the span's count
            // once more than its margin allows for.
            self.span = Default::default();
            return;
        }
        let (rate, promise) = held;
        self.span.add(elapsed, own.read_bytes(), rate, promise);
        let span = self.span;
        let floor = self.floor() as f64;
        // Half the floor's bytes in half a second: far short (an aged
        // drive at one request in flight), and a second's evidence would
        // cost the floor another half second of it.
        let far_short = span.time() >= Duration::from_millis(500) && span.short_of(floor, 0.5);
        if span.time() >= Duration::from_secs(1) || far_short {
            if span.short_of_promise(self.sharing_request()) {
                // The floor is a promise: no trial, and none pending.
                // Kept for the floor itself, and raised in proportion
                // while what is owed is paid back (a depth raised to pay
                // it back and kept would stay, and the application would
                // pay for it after; one sized for the floor alone never
                // paid it back on a drive the depth bounds).
                // Measured at the depth in effect, a trial's included;
                // the trial goes back untried.
                let depth = self.sharing_depth();
                self.floor_account
                    .short(depth, &span, floor, self.max_depth);
                if let Some(t) = self.depth_trial.take() {
                    self.depth = t.before;
                }
            } else if span.short_of(self.rate, 0.8) {
                self.try_more_depth(now);
            }
            self.span = Default::default();
        }
    }

    /// One more request in flight, judged at the next decision (a window
    /// of the application's reads at the new depth) against the last
    /// one. Not without a last decision to judge against, not while
    /// another (or more rate) is on trial, not past a depth that already
    /// cost.
    ///
    /// One more than the controller's depth or the floor's, whichever is
    /// more, not than the depth that pays back what is owed: that one
    /// goes back when the debt is paid, and a trial built on it would
    /// keep it.
    fn try_more_depth(&mut self, now: Duration) {
        let floor = self.floor() as f64;
        let depth = self
            .depth
            .max(self.floor_account.depth(floor, floor, self.max_depth));
        let next = (depth + 1).min(self.max_depth.max(1));
        let capped = self.depth_ceiling.is_some_and(|d| depth >= d);
        let Some(ratio_before) = self.last_ratio else {
            return;
        };
        let pending = self.depth_trial.is_some() || self.rate_trial.is_some();
        // Not while the tail is over: a trial that could only go back.
        let tail_over = self.tail.says() != tail::Says::Within;
        let resting = now < self.trials_from;
        if next <= self.sharing_depth() || capped || pending || tail_over || resting {
            return;
        }
        self.depth_trial = Some(DepthTrial {
            before: self.depth,
            ratio_before,
        });
        self.decided = now;
        self.reads.restart();
        let counts = self.read_times();
        self.tail.restart(counts, false);
        self.depth = next;
    }

    /// A depth on trial is kept if the application's latency did not
    /// rise by more than [`DEPTH_COST`] of its latency alone and its tail
    /// at the drive is not over its target (`tail_over`); otherwise
    /// the depth goes back, and stays there until the application's
    /// latency is learned again. Each step is judged against the one
    /// before (the rate moves too: a ratio from an older depth would
    /// blame the rate's growth on the depth).
    fn judge_depth_trial(&mut self, ratio: f64, tail_over: bool, now: Duration) {
        if let Some(t) = self.depth_trial.take() {
            let mean_cost = ratio - t.ratio_before > DEPTH_COST;
            if mean_cost || tail_over {
                // The trial was one more than all in flight before it.
                let ceiling = self.depth.saturating_sub(1).max(1);
                tracing::debug!(
                    depth = self.depth,
                    ratio,
                    before = t.ratio_before,
                    tail_over,
                    "more depth cost the application: no more than {ceiling}"
                );
                self.depth = t.before;
                self.slow_start = false;
                // The tail's say alone is noise as often: tried again
                // after a while ([`tail::TRIALS_AFTER`]).
                if mean_cost {
                    self.depth_ceiling = Some(ceiling);
                } else {
                    self.rest_trials(now);
                }
            }
        }
        self.last_ratio = Some(ratio);
    }

    fn forget_depth_trials(&mut self) {
        self.trials_from = Duration::ZERO;
        self.last_ratio = None;
        self.depth_trial = None;
        self.depth_ceiling = None;
        self.forget_rate_trial(false);
    }

    pub(super) fn leave_sharing(&mut self) {
        self.phase = Phase::Alone;
        self.slow_start = true;
        // Another application (or drive) is sized for afresh, from the
        // floor up.
        self.app_reads_per_s = 0.0;
        self.forget_depth_trials();
        self.rate = self.floor() as f64;
        self.paused = false;
        self.depth = 1;
        self.span = Default::default();
        self.floor_account = Default::default();
        self.tail.stop_showing();
        self.status.set(None);
    }

    /// For the operator: how far behind its floor the refresh is, when
    /// it makes up for it (learning's silence, a depth found short).
    /// (The last tenth of a MiB is paid at the rate the debt set: the
    /// rate above the floor is still explained.)
    fn behind_the_floor(&self) -> String {
        let mib = f64::from(1 << 20);
        let behind = self.floor_account.owed() / mib;
        let floor = self.floor() as f64 / mib;
        if behind >= 0.1 {
            format!("; {behind:.1} MiB behind its {floor:.1} MiB/s floor, making it up")
        } else if self.floor_now() / mib > floor * 1.05 {
            format!("; making up the last of what it fell behind its {floor:.1} MiB/s floor")
        } else {
            String::new()
        }
    }

    /// What the operator sees while the drive is shared.
    fn show(&self, latencies: Option<(f64, f64)>) {
        let name = self.device.as_ref().map_or("the drive", |d| d.name());
        let allowed = self.allowance();
        let rate = allowed.rate.unwrap_or(0) as f64 / (1 << 20) as f64;
        let refresh = match allowed.request {
            Some(r) => format!("refresh at {rate:.1} MiB/s in {} KiB requests", r >> 10),
            None => format!("refresh at {rate:.1} MiB/s"),
        };
        let at_floor = allowed.rate.is_some_and(|r| r as f64 <= self.floor_now());
        let reason = match latencies {
            Some((app, alone)) => {
                let ratio = app / alone.max(0.001);
                let why = if ratio > AIM && at_floor {
                    format!(" (over its {AIM}× aim, held at the floor: progress is a promise)")
                } else if ratio > AIM {
                    format!(" (over its {AIM}× aim: slowing down)")
                } else {
                    String::new()
                };
                format!(
                    "the application reads on {name}: {app:.2} ms per read, {ratio:.2}× its {alone:.2} ms alone; {refresh}{why}"
                )
            }
            None => format!("the application reads on {name}; {refresh}"),
        };
        let tail = self.tail.shown(at_floor).unwrap_or_default();
        let reason = reason + &self.behind_the_floor() + &tail;
        let since = self
            .status
            .yielding()
            .map_or_else(crate::clock::now_secs, |y| y.since);
        self.status.set(Some(Yielding { since, reason }));
    }
}
