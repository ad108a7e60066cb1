#!/usr/bin/env python3
"""Replays the rounds printed by tests/forecast.rs's
`privileged_the_forecast_says_when_the_drive_degrades` (one line per
round: "age A months: ratio Some(R), fresh F MB/s, ...") under four
fresh references, to tell a run's forecast error by its cause:

- median: the median canary of the kept rounds (the code's before 2026-11-28);
- own: each round's own canary;
- code: the median moved toward the round's own canary by the share of
  its moves from round to round that the stale reads share
  (`History::references`; tools/forecast-sim.py REF=code);
- steps: the median moved toward the round's own canary by how much more
  the canaries spread than one canary read's noise, told from successive
  rounds (the code's on 2026-11-28; tools/forecast-sim.py REF=steps).

The fit is the code's Theil-Sen over (ln age, ln excess) of the last 48
rounds (12 days at 6 h), one bucket a round (the test's data is of one
age), the crossing at excess 1 (half of fresh). Prints each reference's
errors on the forecasts made 6-12 days before the declaration, then the
measured excess against the model's every sixth round.

    python3 tools/forecast-replay.py LOG [DEGRADED_AT_MONTHS]

The test prints "degraded at M months" when it passes; a failed run's
log needs M given (its panic message says when the drive degraded).
"""
import importlib.util
import math
import os
import re
import sys

_spec = importlib.util.spec_from_file_location(
    "forecast_sim", os.path.join(os.path.dirname(os.path.abspath(__file__)), "forecast-sim.py"))
SIM = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(SIM)

KEEP, MIN_EXCESS = 48, 0.05


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def rounds_of(path):
    rows, degraded = [], None
    for line in open(path):
        m = re.search(r"age ([\d.]+) months: ratio Some\(([\d.e-]+)\), fresh ([\d.]+) MB/s", line)
        if m:
            rows.append(tuple(map(float, m.groups())))
        m = re.search(r"degraded at ([\d.]+) months", line)
        if m:
            degraded = float(m.group(1))
    return rows, degraded


def references(window, mode):
    fresh = [f for _, _, f in window]
    if mode == "own":
        return fresh
    lf = [math.log(f) for f in fresh]
    m = median(lf)
    w = 0.0
    if mode == "code":
        # The code's (src/policy/forecast.rs, `History::shared_share`),
        # as the simulator has it.
        rounds = [(a, f, r * f) for a, r, f in window]
        w = SIM.shared_share(rounds, math.exp(m))
    if mode == "steps":
        var = sum((x - m) ** 2 for x in lf) / len(lf)
        noise = var
        if len(lf) > 2:
            d = [abs(b - a) for a, b in zip(lf, lf[1:])]
            noise = (median(d) * 1.4826) ** 2 / 2
        w = max(0.0, var - noise) / var if var > 0 else 0.0
    return [math.exp(m + w * (x - m)) for x in lf]


def crossing(window, mode):
    """The fit's age at excess 1, and its slope."""
    pts = []
    for (a, ratio, fresh), ref in zip(window, references(window, mode)):
        e = ref / (ratio * fresh) - 1
        if e >= MIN_EXCESS:
            pts.append((math.log(a), math.log(e)))
    slopes = [(q[1] - p[1]) / (q[0] - p[0])
              for i, p in enumerate(pts) for q in pts[i + 1:]
              if abs(q[0] - p[0]) >= math.log(1.02)]
    if not slopes:
        return None
    k = median(slopes)
    c = median([y - k * x for x, y in pts])
    return math.exp(-c / k), k


def model_excess(a):
    x = (a / 2.19) ** 3.6
    return 8.92 * (x / (1 + x)) ** 1.51


def main():
    rows, degraded = rounds_of(sys.argv[1])
    if len(sys.argv) > 2:
        degraded = float(sys.argv[2])
    if degraded is None:
        sys.exit("no 'degraded at' in the log: give DEGRADED_AT_MONTHS")
    for mode in ("median", "own", "steps", "code"):
        errs = []
        for i, (a, _, _) in enumerate(rows):
            if 0.2 <= degraded - a < 0.4:
                said = crossing(rows[max(0, i - KEEP + 1):i + 1], mode)
                if said:
                    errs.append(f"{((said[0] - a) / (degraded - a) - 1) * 100:+.0f}%/k{said[1]:.2f}")
        print(f"{mode:6s} {' '.join(errs)}")
    ref = median([f for _, _, f in rows])
    for a, ratio, fresh in rows[::6]:
        print(f"{a:.3f} months: model {model_excess(a):.3f}, own canary {1 / ratio - 1:.3f}, "
              f"median canary {ref / (ratio * fresh) - 1:.3f}, fresh {fresh:.1f} MB/s")


main()
