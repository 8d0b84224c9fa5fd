"""The collapse rule (rlkit.monitor.collapse) on simulated 16-trial runs: how often it names a healthy run,
how soon it names a collapsing one. Judged after every step, as `rlkit status` would be.

  healthy    40 steps: each step's pass probability drawn in 0.4-0.7, 16 trials (a step jitters by ~±0.2),
             entropy 0.1 x lognormal(0, 0.3), agent_error ~8% of trials
  drifting   40 steps: the pass probability slides 0.65 -> 0.30 (harder tasks later), entropy as healthy
  collapse   16 steps shaped like the LR 3e-4 run measured on the embedded default: 0.38, then 0.55 for 7
             steps, then down to 0.13 by step 16; entropy 0.13 -> 0.59 (x lognormal(0, 0.2))
  takeover   12 steps: agent_error 10% -> 100% of trials by step 10, the pass rate 0.40 -> 0.25 (the
             reward still pays part of the broken endings)

    .venv/bin/python bench/collapse_rule.py [--runs 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlkit.monitor.collapse import StepPoint, detect

TRIALS = 16


def _passes(rng: random.Random, p: float) -> float:
    return sum(rng.random() < p for _ in range(TRIALS)) / TRIALS


def healthy(rng: random.Random) -> list[StepPoint]:
    out = []
    for s in range(1, 41):
        r, errors = _passes(rng, rng.uniform(0.4, 0.7)), _passes(rng, 0.08)
        out.append(StepPoint(s, r, 0.1 * rng.lognormvariate(0, 0.3),
                             {"passed": r, "agent_error": errors, "failed_tests": max(0.0, 1 - r - errors)}))
    return out


def drifting(rng: random.Random) -> list[StepPoint]:
    out = []
    for s in range(1, 41):
        r = _passes(rng, 0.65 - 0.35 * s / 40)
        out.append(StepPoint(s, r, 0.1 * rng.lognormvariate(0, 0.3), {"passed": r, "failed_tests": 1 - r}))
    return out


def collapse(rng: random.Random) -> list[StepPoint]:
    out = []
    for s in range(1, 17):
        p = 0.38 if s == 1 else (0.55 if s <= 8 else 0.55 - 0.42 * (s - 8) / 8)
        e = (0.13 if s <= 8 else 0.13 + 0.46 * (s - 8) / 8) * rng.lognormvariate(0, 0.2)
        r = _passes(rng, p)
        out.append(StepPoint(s, r, e, {"passed": r, "failed_tests": 1 - r}))
    return out


def takeover(rng: random.Random) -> list[StepPoint]:
    out = []
    for s in range(1, 13):
        share = min(1.0, 0.1 + 0.9 * max(0, s - 2) / 8)
        r, errors = _passes(rng, 0.4 * (1 - share) + 0.25 * share), _passes(rng, share)
        out.append(StepPoint(s, r, 0.1 * rng.lognormvariate(0, 0.3),
                             {"agent_error": errors, "passed": r, "failed_tests": max(0.0, 1 - errors - r)}))
    return out


def first_named(points: list[StepPoint]) -> int | None:
    return next((points[k - 1].step for k in range(1, len(points) + 1) if detect(points[:k])), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"| case ({args.runs} simulated runs each) | named | first named at step (median) |\n|---|---|---|")
    for name, make in (("healthy", healthy), ("drifting", drifting), ("collapse", collapse), ("takeover", takeover)):
        steps = [first_named(make(rng)) for _ in range(args.runs)]
        named = [s for s in steps if s is not None]
        median = f"{statistics.median(named):g}" if named else "—"
        print(f"| {name} | {len(named)} ({len(named) / args.runs:.1%}) | {median} |")


if __name__ == "__main__":
    main()
