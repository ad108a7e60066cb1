#!/usr/bin/env python3
"""Simulates the forecast (src/policy/forecast.rs) on a matrix of decay
shapes, to judge its choices on curves it was not tuned on.

The shapes: the testbed's 840evo model (testbed/src/model.rs) and four
other saturating curves (steeper, softer, later, one levelling off just
past the floor), three pure powers of age, and one that accelerates
(exponential in age). Each run ages the data step by step from where it
first reads 3 % slow to where it reads at half of fresh; each round reads
the stale data and a fresh canary with multiplicative noise (sigma per
read). On the testbed's model that span is 24.5 days: STEPS rounds over
it (default 98) are a round every 6 h, the daemon's default
`sample_interval`, and 48 rounds kept are its `FIT_WINDOW` of 12 days
(STEPS=32 is about the 18 h step tests/forecast.rs took before, where 16
rounds were 12 days). Every shape's span is taken as the same 24.5 days. The drive is declared degraded as the daemon declares it:
a round below half of fresh is sampled again at once, and two of the last
three below is degraded (as tests/forecast.rs does, the re-sample is not
kept as a round of points; the daemon keeps it). The forecasts made 6 to
12 days before that are compared with when it happened, as
tests/forecast.rs does.

The forecast is the code's: Theil–Sen over (ln age, ln excess) of the kept
rounds, each against its round's reference (REF=code, the default: the
median canary of the kept rounds moved toward the round's own canary by
the share of its moves from round to round that the stale reads share;
`History::references`, `History::shared_share`).

A loaded host (LOAD > 0): bursts of load start at a round with chance
1/30 and last 8-24 rounds (2-6 days of the data's life; 1-4 minutes of
the testbed test's, where one round takes ~10 s), each adding a delay of
up to LOAD (uniform) times a fresh read's time to every read of a round
(BURST=both), or to its canary alone (BURST=canary: a burst that falls
on the canary and not on the stale data, as one could when the sampler
read the canary last in a round, before 2026-11-28). The
drive is declared degraded by the round's own canary, as the daemon
does. JITTER > 0: load that changes every round, a delay of up to JITTER
(uniform) times a fresh read's time on every read of the round, canary
and stale alike (the sampler reads them in step). REF chooses the
reference the points are measured against: the code's (code), the
median canary of the kept rounds (median, the code's before
2026-11-28), each round's own canary (own), the median moved toward the
round's own canary by the share of the canaries' spread that successive
rounds cannot tell from one read's noise (steps, the code's on
2026-11-28), or that with the noise per read known (shrink). LAGS: how
many rounds apart the code's share compares rounds (`SHARED_LAGS`, 8).

    [STEPS=98] [LOAD=0] [BURST=both|canary] [JITTER=0] [LAGS=8] \
        [REF=code|median|own|steps|shrink] \
        python3 tools/forecast-sim.py [SIGMA] [ROUNDS_KEPT,...]

Prints, per shape, the forecasts' mean error / sd / the share of runs
whose every forecast is within ±25 % / the share of forecasts withheld
because the slope's range held 0 (a withheld forecast counts as a miss).
"""
import math
import os
import random
import statistics as st
import sys

MIN_EXCESS, RUNS = 0.05, int(os.environ.get("RUNS", "100"))
STEPS = int(os.environ.get("STEPS", "98"))
REF = os.environ.get("REF", "code")
LOAD = float(os.environ.get("LOAD", "0"))
BURST = os.environ.get("BURST", "both")
JITTER = float(os.environ.get("JITTER", "0"))
# 6 to 12 days of the 24.5-day span, in steps.
JUDGED = (STEPS * 6 / 24.5, STEPS * 12 / 24.5)


def hill(tau, b, gain, power):
    return lambda a: gain * ((a / tau) ** b / (1 + (a / tau) ** b)) ** power


SHAPES = {
    "840evo": hill(2.19, 3.6, 8.92, 1.51),
    "hill-steep": hill(2.0, 5.0, 4.0, 1.0),
    "hill-soft": hill(3.0, 2.5, 20.0, 1.2),
    "hill-late": hill(6.0, 3.0, 30.0, 1.0),
    "hill-lowgain": hill(2.0, 3.6, 2.2, 1.5),
    "power-1.5": lambda a: 0.2 * a**1.5,
    "power-3": lambda a: 0.05 * a**3,
    "power-6": lambda a: 0.2 * a**6,
    "exponential": lambda a: 0.02 * (math.exp(a / 0.6) - 1),
}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def months_until_excess_1(points, age):
    """The code's fit and its crossing of excess 1 (half of fresh), with
    its rule for a slope the points cannot tell from their noise (Sen's
    ~95 % range of the slope holds 0; fewer than ten points' slopes
    are bounded by nothing above), or its median slope crosses beyond the
    horizon: no forecast (None) unless even the steepest slope in the
    range stays above the floor (math.inf: "not within the horizon", as
    is a slope at or below 0)."""
    xs = [(math.log(a), math.log(e)) for a, e in points]
    slopes = sorted((q[1] - p[1]) / (q[0] - p[0])
                    for i, p in enumerate(xs) for q in xs[i + 1:]
                    if abs(q[0] - p[0]) >= math.log(1.02))
    if not slopes:
        return None
    n = len(xs)
    c = 1.96 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    last = len(slopes) - 1
    upper = min(math.ceil((len(slopes) + c) / 2), last)
    lo, hi = slopes[last - upper], slopes[upper]
    if n < 10:
        hi = math.inf  # fewer than 10 points bound nothing above

    def crossing(k):
        ln_c = median([y - k * x for x, y in xs])
        if k <= 0 or -ln_c / k > 5:
            return math.inf
        return max(0.0, math.exp(-ln_c / k) - age)

    if lo > 0 and math.isfinite(crossing(median(slopes))):
        return crossing(median(slopes))
    if hi <= 0:
        return math.inf
    if math.isinf(hi):
        return None
    return None if math.isfinite(crossing(hi)) else math.inf


def span(f):
    a = 0.01
    while f(a) < 0.03:
        a *= 1.01
    start = a
    while f(a) < 1.0:
        a *= 1.001
    return start, a


def shared_share(rounds, mid, lags=8):
    """`History::shared_share`: the slope of the stale read's time change
    on the canary's between rounds up to `lags` apart (both as a share of
    the median canary's time), centred per distance on the stale reads'
    mean change, in [0, 1]."""
    x = [mid / fr for _, fr, _ in rounds]
    y = [mid / s for _, _, s in rounds]
    num = den = 0.0
    for lag in range(1, lags + 1):
        dx = [b - a for a, b in zip(x, x[lag:])]
        dy = [b - a for a, b in zip(y, y[lag:])]
        if len(dx) < 2:
            continue
        ageing = sum(dy) / len(dy)
        num += sum(a * (b - ageing) for a, b in zip(dx, dy))
        den += sum(a * a for a in dx)
    return max(0.0, min(1.0, num / den)) if den > 0 else 0.0


def reference_points(rounds, sigma):
    """(age, excess) of each kept round (age, canary, stale read), against
    the reference REF chooses."""
    if REF == "own":
        return [(a, fr / s - 1) for a, fr, s in rounds]
    lf = [math.log(fr) for _, fr, _ in rounds]
    m = median(lf)
    w = 0.0
    if REF == "code":
        w = shared_share(rounds, math.exp(m), int(os.environ.get("LAGS", "8")))
    if REF in ("shrink", "steps"):
        var = sum((x - m) ** 2 for x in lf) / len(lf)
        noise = sigma * sigma
        if REF == "steps":
            # One read's noise told from successive rounds, as
            # `History::references` does: a burst lasts many.
            d = [abs(b - a) for a, b in zip(lf, lf[1:])]
            noise = (median(d) * 1.4826) ** 2 / 2 if len(lf) > 2 else var
        w = max(0.0, var - noise) / var if var > 0 else 0.0
    return [(a, math.exp(m + w * (math.log(fr) - m)) / s - 1) for a, fr, s in rounds]


def run(f, seed, sigma, keep):
    start, cross = span(f)
    step = (cross - start) / STEPS
    rnd = random.Random(seed)
    # The load has its own draws: the reads' noise is the same with or
    # without it.
    lrnd = random.Random(seed + 7777)
    load = {"left": 0, "d": 0.0}

    def tick():
        if load["left"] == 0:
            load["d"] = 0.0
            if lrnd.random() < 1 / 30:
                load["left"], load["d"] = lrnd.randint(8, 24), lrnd.uniform(0, LOAD)
        else:
            load["left"] -= 1

    jitter = {"d": 0.0}
    sd = lambda: (load["d"] if BURST == "both" else 0.0) + jitter["d"]
    read = lambda age: 1 / (1 + f(age) + sd()) * math.exp(rnd.gauss(0, sigma))
    fread = lambda: 1 / (1 + load["d"] + jitter["d"]) * math.exp(rnd.gauss(0, sigma))
    age, rounds, said, last3 = start, [], [], []
    while True:
        tick()
        if JITTER > 0:
            jitter["d"] = lrnd.uniform(0, JITTER)
        fresh, stale = fread(), read(age)
        rounds = (rounds + [(age, fresh, stale)])[-keep:]
        points = reference_points(rounds, sigma)
        points = [p for p in points if p[1] >= MIN_EXCESS]
        said.append((age, months_until_excess_1(points, age) if len(points) > 1 else None))
        last3 = (last3 + [stale / fresh < 0.5])[-3:]
        again = 0
        while last3[-1] and sum(last3) < 2 and again < 2:
            again += 1
            last3 = (last3 + [read(age) / fread() < 0.5])[-3:]
        if sum(last3) >= 2:
            break
        age += step
    at = age - step / 2
    # No forecast (None) and "not within the horizon" (inf) both miss.
    return [d / (at - a) - 1 if d is not None else None
            for a, d in said if JUDGED[0] * step <= at - a < JUDGED[1] * step]


def main():
    sigma = float(sys.argv[1]) if len(sys.argv) > 1 else 0.01
    keeps = [int(k) for k in sys.argv[2].split(",")] if len(sys.argv) > 2 else [48]
    print(f"sigma {sigma}: mean error / sd / runs with every forecast within ±25 %"
          " / forecasts withheld (the slope's range held 0)")
    for keep in keeps:
        row, oks = f"kept {keep:2d}", []
        for name, f in SHAPES.items():
            errs, worst, said, none = [], [], 0, 0
            for seed in range(RUNS):
                e = run(f, seed, sigma, keep)
                said, none = said + len(e), none + e.count(None)
                e = [math.inf if x is None else x for x in e]
                errs += [x for x in e if math.isfinite(x)]
                worst.append(max(map(abs, e)) if e else math.inf)
            ok = sum(w <= 0.25 for w in worst) / RUNS
            oks.append(ok)
            row += (f" | {name} {st.mean(errs):+.2f}/{st.pstdev(errs):.2f}/{ok:.2f}"
                    f"/{none / max(said, 1):.2f}")
        print(f"{row} || mean {st.mean(oks):.2f}", flush=True)


if __name__ == "__main__":
    main()
