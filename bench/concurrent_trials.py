"""Many trials at once on this machine: zero failures, and how long the batch takes.

Runs N trials (default 32) of the bundled tasks through `run_trials`, oracle and nop
alternating, all at once (max_concurrency = N), and checks that every oracle trial got
reward 1, every nop trial reward 0, and that no sandbox is left behind. Prints counts,
the wall time, and two floors measured in the same run at the same concurrency: the same
number of `docker run --rm IMAGE true`, and of `docker run --rm TASK_IMAGE bash /tests/test.sh`
(the grading work itself, without the trial machinery).

    python bench/concurrent_trials.py [--trials 32] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlkit.tasks.images import task_image_ref

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
IMAGE = "rlkit/base:bookworm"


def floor(n: int, concurrency: int, task_dirs: list[Path] | None = None) -> float:
    """n x `docker run --rm IMAGE true`; with task_dirs, each run executes that task's test.sh instead."""
    def one(i: int) -> None:
        if task_dirs is None:
            cmd = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
        else:
            task = task_dirs[i % len(task_dirs)]
            cmd = ["docker", "run", "--rm", "--network", "none", "-v", f"{task / 'tests'}:/tests:ro",
                   task_image_ref(task.name), "bash", "/tests/test.sh"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=None, help="default: all trials at once")
    args = parser.parse_args()
    concurrency = args.concurrency or args.trials
    logging.disable(logging.WARNING)

    from rlkit.rollout.trial import TrialSpec, run_trials
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.dockerd import ensure_dockerd
    from rlkit.sandbox.images import build_task_images
    from rlkit.sandbox.labels import EXPERIMENT, label_value
    from rlkit.tasks.images import discover_tasks

    ensure_dockerd()
    build_task_images(discover_tasks(EXAMPLES))
    tasks = sorted(p.parent for p in EXAMPLES.glob("*/task.toml"))
    experiment = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-") as tmp:
        specs = [TrialSpec(task_dir=tasks[i % len(tasks)], agent="oracle" if i % 2 == 0 else "nop",
                           trials_root=Path(tmp), project="bench", experiment=experiment,
                           environment_kwargs={"network": "none"}) for i in range(args.trials)]
        started = time.perf_counter()
        outcomes = asyncio.run(run_trials(specs, max_concurrency=concurrency))
        wall = time.perf_counter() - started
    floor_wall = floor(args.trials, concurrency)
    grading_wall = floor(args.trials, concurrency, tasks)

    wrong = [(s.task_dir.name, s.agent, o.reward, o.reason, o.exception_type)
             for s, o in zip(specs, outcomes, strict=True)
             if o.reason not in ("passed", "failed_tests") or o.reward != (1.0 if s.agent == "oracle" else 0.0)]
    leftover = api_client().containers(all=True, filters={"label": f"{EXPERIMENT}={label_value(experiment)}"})
    reasons = collections.Counter(o.reason for o in outcomes)
    totals = [o.timings.get("total", 0.0) for o in outcomes]
    print(f"trials={args.trials} concurrency={concurrency} tasks={len(tasks)} cores=2")
    print(f"reasons: {dict(reasons)}")
    print(f"wrong rewards/failures: {len(wrong)}   leftover containers: {len(leftover)}")
    for item in wrong[:10]:
        print(f"  ✗ {item}")
    print(f"wall {wall:.1f}s  ({args.trials / wall:.2f} trials/s)   per-trial total: median "
          f"{statistics.median(totals):.1f}s, max {max(totals):.1f}s")
    phases = ("environment_setup", "agent_execution", "verifier")
    print("per-trial phase medians: " + "  ".join(
        f"{k}={statistics.median([o.timings.get(k, 0.0) for o in outcomes]):.1f}s" for k in phases))
    print(f"floor: {args.trials} x `docker run --rm IMAGE true` at the same concurrency: {floor_wall:.1f}s "
          f"-> ratio {wall / floor_wall:.2f}x")
    print(f"floor: {args.trials} x `docker run --rm TASK_IMAGE bash /tests/test.sh` (the same grading work, no "
          f"trial machinery): {grading_wall:.1f}s -> ratio {wall / grading_wall:.2f}x")
    return 0 if not wrong and not leftover else 1


if __name__ == "__main__":
    raise SystemExit(main())
