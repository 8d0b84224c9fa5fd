"""What grading in a clean container costs, as a share of a whole trial.

rlkit grades a task whose result lives in files in a new container from the task's image,
into which only the agent's work product is copied (docs/grading.md); a task whose result is
the container's state is graded in place. This runs whole trials (`rlkit.rollout.trial.run_trial`:
sandbox start, agent, verifier, removal) of the same tasks both ways, interleaved so drift in
machine load hits both alike, one trial at a time:

* clean: the task as it is (the default): the verifier judges the work product's changes,
  carries them out through dockerd, starts the clean container, counts the pristine tests
  (test.sh under `--collect-only` there), copies the product in and runs the tests;
* in place: a copy of the task that declares `grading = "in-place"`: the verifier judges every
  change of the agent's sandbox (twice) and runs the tests there.

Both keep the verifier's own record of the pytest run. Printed per case: the median verifier
and whole-trial seconds each way, and the clean container's extra cost (clean verifier less
in-place verifier) as a share of the whole clean trial. `--model-trial-s S` adds the share of a
model trial of S seconds (a Terminus trial of the quickstart's policy; `bench/rollout_throughput.py`
prints its time split), since the extra cost does not depend on the agent.

    python bench/grading_check.py [--reps 5] [--model-trial-s 6.2]

Goal: the clean container costs < 50% of an oracle trial (the cheapest trial there is).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "merge-intervals oracle": ROOT / "examples" / "tasks" / "merge-intervals",
    "log-error-count oracle": ROOT / "tests" / "rollout" / "data" / "log-error-count",
}


def in_place_copy(task_dir: Path, root: Path) -> Path:
    target = root / "in-place" / task_dir.name
    if not target.exists():
        shutil.copytree(task_dir, target)
        with (target / "task.toml").open("a") as toml:
            toml.write('\n[verifier.rlkit]\ngrading = "in-place"\n')
    return target


def one_trial(task_dir: Path, root: Path, session: str) -> dict[str, float]:
    from rlkit.rollout.trial import TrialSpec, run_trial

    spec = TrialSpec(task_dir=task_dir, agent="oracle", trials_root=root / "trials", session=session,
                     project="bench-grading", environment_kwargs={"network": "none"})
    outcome = asyncio.run(run_trial(spec))
    if (outcome.reward, outcome.reason) != (1.0, "passed"):
        raise SystemExit(f"{task_dir.name} ({session}): {outcome.reason} {outcome.exception_message}")
    return {"verifier": outcome.timings.get("verifier", 0.0), "total": outcome.timings["total"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--model-trial-s", type=float, default=None,
                        help="seconds of a whole model trial, to print the extra cost's share of one")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from rlkit.rollout.trial import preload
    from rlkit.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()
    preload("oracle", "docker")
    rows: dict[str, dict[str, list[dict[str, float]]]] = {name: {"clean": [], "in-place": []} for name in CASES}
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-") as tmp:
        root = Path(tmp)
        for name, task_dir in CASES.items():  # warm: images built and profiled, imports done
            one_trial(task_dir, root, f"warm-{task_dir.name}")
            one_trial(in_place_copy(task_dir, root), root, f"warm-ip-{task_dir.name}")
        for rep in range(args.reps):
            for name, task_dir in CASES.items():
                order = [("clean", task_dir), ("in-place", in_place_copy(task_dir, root))]
                for mode, path in order if rep % 2 == 0 else order[::-1]:
                    rows[name][mode].append(one_trial(path, root, f"{mode}-{task_dir.name}-{rep}"))
    print(f"reps={args.reps}  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          "medians, one trial at a time")
    for name, modes in rows.items():
        med = {mode: {k: statistics.median(r[k] for r in runs) for k in ("verifier", "total")}
               for mode, runs in modes.items()}
        extra = med["clean"]["verifier"] - med["in-place"]["verifier"]
        line = (f"{name:<24} verifier clean {med['clean']['verifier']:5.2f}s  in place {med['in-place']['verifier']:5.2f}s"
                f"   trial clean {med['clean']['total']:5.2f}s  in place {med['in-place']['total']:5.2f}s"
                f"   clean container +{extra:4.2f}s = {100 * extra / med['clean']['total']:4.1f}% of the oracle trial")
        if args.model_trial_s:
            line += f", {100 * extra / (args.model_trial_s + extra):4.1f}% of a {args.model_trial_s:g}s model trial"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
