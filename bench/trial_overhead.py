"""Per-trial overhead of rlkit's trial runner against a `docker run --rm IMAGE true` floor.

A trial of a trivial task (start sandbox, run the agent, verify, stop and remove) is
timed end to end, several times, next to the floor measured in the same run. Also
times the raw sandbox lifecycle (DockerEnvironment start/exec/stop without harbor's
Trial) so the two layers' costs can be told apart.

    python bench/trial_overhead.py [--reps 7] [--agent nop] [--network none]

Goal: trial median ≤ 1.3× the floor median; the verifier's tamper check < 5% of the raw
sandbox lifecycle (`bench/grading_check.py` measures it, and a clean-room grading, in detail).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = ROOT / "tests" / "rollout" / "data" / "trivial"
IMAGE = "rlkit/base:bookworm"
ORACLE_TASK = ROOT / "examples" / "tasks" / "merge-intervals"  # a real task: git, a patch, a project tree


def floor_once(network: str) -> float:
    started = time.perf_counter()
    subprocess.run(["docker", "run", "--rm", "--network", network, IMAGE, "true"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


async def trial_once(root: Path, agent: str, network: str) -> tuple[float, dict[str, float], str]:
    from rlkit.rollout.trial import TrialSpec, run_trial

    started = time.perf_counter()
    outcome = await run_trial(TrialSpec(task_dir=TRIVIAL, agent=agent, trials_dir=root,
                                        environment_kwargs={"network": network}))
    wall = time.perf_counter() - started
    if outcome.reason != "passed" or outcome.reward != 1.0:
        raise SystemExit(f"trivial trial failed: {outcome}")
    return wall, outcome.timings, outcome.reason


async def sandbox_once(root: Path, network: str) -> dict[str, float]:
    """The backend alone: start, one exec, stop(delete) — what every trial pays at least."""
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    from rlkit.sandbox.docker import DockerEnvironment

    task = Task(TRIVIAL)
    paths = TrialPaths(trial_dir=root / f"raw-{time.monotonic_ns()}")
    paths.mkdir()
    env = DockerEnvironment(environment_dir=task.paths.environment_dir, environment_name=task.name,
                            session_id="bench-raw", trial_paths=paths, task_env_config=task.config.environment,
                            network=network)
    t0 = time.perf_counter()
    await env.start(force_build=False)
    t1 = time.perf_counter()
    await env.exec("true")
    t2 = time.perf_counter()
    await env.stop(delete=True)
    t3 = time.perf_counter()
    return {"start": t1 - t0, "exec": t2 - t1, "remove": t3 - t2, "total": t3 - t0}


async def tamper_check_once(root: Path, network: str) -> float:
    """The verifier's tamper check (list the changes, judge them) on a sandbox an oracle has worked in."""
    from rlkit.rollout.trial import TrialSpec, run_trial
    from rlkit.sandbox import tamper

    seconds: list[float] = []
    snapshot, judge = tamper.snapshot, tamper.judge

    async def timed_snapshot(environment, **kwargs):  # the verifier's calls, timed in place
        started = time.perf_counter()
        snap = await snapshot(environment, **kwargs)
        seconds.append(time.perf_counter() - started)
        return snap

    async def timed_judge(*args, **kwargs):
        started = time.perf_counter()
        verdict = await judge(*args, **kwargs)
        seconds.append(time.perf_counter() - started)
        return verdict

    tamper.snapshot, tamper.judge = timed_snapshot, timed_judge
    try:
        outcome = await run_trial(TrialSpec(task_dir=ORACLE_TASK, agent="oracle", trials_dir=root,
                                            environment_kwargs={"network": network}))
    finally:
        tamper.snapshot, tamper.judge = snapshot, judge
    if outcome.reason != "passed":
        raise SystemExit(f"the oracle trial failed: {outcome}")
    return sum(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--agent", default="nop", help="nop (pure overhead) or oracle")
    parser.add_argument("--network", default="none", choices=["none", "bridge", "host"])
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from rlkit.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()
    floor_once(args.network)  # warm the image and daemon caches
    floors, walls, raws, blocks, tampers = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-") as tmp:
        root = Path(tmp)
        asyncio.run(trial_once(root, args.agent, args.network))  # warm imports
        for _ in range(args.reps):  # interleaved, so drift in machine load hits both alike
            floors.append(floor_once(args.network))
            wall, timings, _ = asyncio.run(trial_once(root, args.agent, args.network))
            walls.append(wall)
            blocks.append(timings)
            raws.append(asyncio.run(sandbox_once(root, args.network)))
            tampers.append(asyncio.run(tamper_check_once(root, args.network)))

    def med(values: list[float]) -> float:
        return statistics.median(values)

    floor = med(floors)
    print(f"reps={args.reps} agent={args.agent} network={args.network} image={IMAGE}")
    print(f"floor  docker run --rm IMAGE true     median {floor:6.3f}s  (min {min(floors):.3f}s)")
    print(f"raw    DockerEnvironment start/exec/rm median {med([r['total'] for r in raws]):6.3f}s  "
          + "  ".join(f"{k}={med([r[k] for r in raws]):.3f}s" for k in ("start", "exec", "remove")))
    print(f"trial  run_trial (harbor Trial)       median {med(walls):6.3f}s  (min {min(walls):.3f}s)")
    for key in ("environment_setup", "agent_setup", "agent_execution", "verifier"):
        values = [b.get(key, 0.0) for b in blocks]
        print(f"         {key:<18} median {med(values):.3f}s")
    print(f"ratio  raw sandbox / floor = {med([r['total'] for r in raws]) / floor:.2f}x")
    print(f"ratio  trial / floor       = {med(walls) / floor:.2f}x   (goal <= 1.3x)")
    raw = med([r["total"] for r in raws])
    print(f"tamper check (changes + judgement, after an oracle on {ORACLE_TASK.name}) median {med(tampers):.4f}s "
          f"= {100 * med(tampers) / raw:.1f}% of the raw sandbox lifecycle (goal < 5%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
