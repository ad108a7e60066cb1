#!/usr/bin/env python3
"""Simulates the forecast (src/policy/forecast.rs) on the testbed's 840evo
decay model (testbed/src/model.rs), to see what its error is made of.

Data ages 0.025 months per round from 0.7; each round reads the stale data
and a fresh canary with multiplicative noise (sigma per read); the drive is
declared degraded when two of the last three rounds read below half of
fresh. The forecasts made 6 to 12 days before that are compared with when
it happened, as tests/forecast.rs does. Two fresh references: each round's
own canary, and the median canary of the kept rounds (what the code does).

    python3 tools/forecast-sim.py        # 300 seeds per row, ~10 s
"""
import math
import random
import statistics as st

TAU, B, GAIN, POW = 2.19, 3.6, 8.92, 1.51  # testbed/src/model.rs, 840evo
FRESH, STEP, KEEP, MIN_EXCESS = 350e6, 0.025, 16, 0.05


def excess(age):
    xb = (age / TAU) ** B
    return GAIN * (xb / (1 + xb)) ** POW


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def theil_sen(points):
    xs = [(math.log(a), math.log(e)) for a, e in points]
    slopes = [(q[1] - p[1]) / (q[0] - p[0])
              for i, p in enumerate(xs) for q in xs[i + 1:]
              if abs(q[0] - p[0]) >= math.log(1.02)]
    if not slopes:
        return None
    k = median(slopes)
    return median([y - k * x for x, y in xs]), k


def days_until(fit, age, floor_excess=1.0):
    ln_c, k = fit
    if k <= 0:
        return None
    z = (math.log(floor_excess) - ln_c) / k
    return None if z > 5 else max(0.0, math.exp(z) - age)


def run(seed, sigma, median_fresh):
    rnd = random.Random(seed)
    age, rounds, said, last3 = 0.7, [], [], []
    while age < 4:
        fresh = FRESH * math.exp(rnd.gauss(0, sigma))
        stale = FRESH / (1 + excess(age)) * math.exp(rnd.gauss(0, sigma))
        rounds = (rounds + [(age, fresh, stale)])[-KEEP:]
        ref = median([r[1] for r in rounds]) if median_fresh else None
        points = [(a, (ref or f) / s - 1) for a, f, s in rounds]
        points = [p for p in points if p[1] >= MIN_EXCESS]
        fit = theil_sen(points)
        said.append((age, days_until(fit, age) if fit else None))
        last3 = (last3 + [stale / fresh < 0.5])[-3:]
        if sum(last3) >= 2:
            break
        age += STEP
    at = age - STEP / 2
    return [d / (at - a) - 1 for a, d in said
            if 0.2 <= at - a < 0.4 and d is not None]


for sigma in (0.01, 0.02, 0.03):
    for median_fresh in (False, True):
        errs, worst = [], []
        for seed in range(300):
            e = run(seed, sigma, median_fresh)
            errs += e
            worst.append(max(map(abs, e)) if e else 9)
        print(f"sigma {sigma:.2f} reference {'median canary' if median_fresh else 'own canary  '}"
              f"  error mean {st.mean(errs):+.2f} sd {st.pstdev(errs):.2f}"
              f"  runs all within 25 % {sum(w <= .25 for w in worst) / len(worst):.2f},"
              f" 50 % {sum(w <= .5 for w in worst) / len(worst):.2f}")
