"""What the tamper check costs per trial, in place, next to grading in a clean room.

For each case (an oracle's solution; a solution that also pip-installs a package), a
sandbox of the task is started, the agent's work is done in it, and then:

* in place (what rlkit does): list the changes (the overlay upper layer) and judge them
  against the image's profile (cached per image), twice (before and after the kill);
* clean room (the alternative): the same listing, then the agent's changes outside the
  interpreter, command and library folders are packed, a fresh container of the task image
  is started, they are unpacked into it, and it is removed (the tests would run there).

Both are printed as a share of the raw sandbox lifecycle (DockerEnvironment start, one exec,
stop) measured in the same run, interleaved so drift in machine load hits all alike.

    python bench/grading_check.py [--reps 7]

Goal: the in-place check < 5% of the raw sandbox lifecycle.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "merge-intervals oracle": (ROOT / "examples" / "tasks" / "merge-intervals", None),
    "log-error-count oracle": (ROOT / "tests" / "rollout" / "data" / "log-error-count", None),
    "log-error-count + pip install": (ROOT / "tests" / "rollout" / "data" / "log-error-count",
                                      "pip_install_package"),
}


def _environment(task_dir: Path, root: Path, session: str):
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    from rlkit.sandbox.docker import DockerEnvironment
    from rlkit.tasks.images import read_task_spec

    task = Task(task_dir)
    paths = TrialPaths(trial_dir=root / f"{session}-{time.monotonic_ns()}")
    paths.mkdir()
    return DockerEnvironment(environment_dir=task.paths.environment_dir, environment_name=task.name,
                             session_id=session, trial_paths=paths, task_env_config=task.config.environment,
                             network="none", image=read_task_spec(task_dir).image)


async def raw_lifecycle(task_dir: Path, root: Path) -> float:
    env = _environment(task_dir, root, "bench-raw")
    started = time.perf_counter()
    await env.start(force_build=False)
    await env.exec("true")
    await env.stop(delete=True)
    return time.perf_counter() - started


def _agent_script(task_dir: Path, variant: str | None) -> str:
    solve = (task_dir / "solution" / "solve.sh").read_text()
    if variant is None:
        return solve
    from tests.rollout.scripted import LEGIT

    legit = LEGIT[variant]
    return legit.script if legit.solves else f"{legit.script}\n{solve}"


def _outside_system_areas(profile, paths: list[str]) -> list[str]:
    """What a clean room carries over: changes outside every interpreter, command and library folder."""
    areas = {*profile.path_dirs, *profile.lib_dirs, *(d for i in profile.interpreters for d in i.sys_path)}
    keep = []
    for path in paths:
        parents = {path, *map(str, Path(path).parents)}
        if not parents & areas and not path.startswith(("/logs/", "/tmp/")):
            keep.append(path)
    return keep


def _pack(merged: str, paths: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in paths:
            host = merged + path
            if os.path.lexists(host) and not os.path.isdir(host) or os.path.islink(host):
                tar.add(host, arcname=path.lstrip("/"), recursive=False)
    return buf.getvalue()


async def one_case(task_dir: Path, variant: str | None, root: Path) -> dict[str, float]:
    from rlkit.sandbox import tamper
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.pool import run_blocking

    env = _environment(task_dir, root, "bench-check")
    await env.start(force_build=False)
    try:
        result = await env.exec(f"set -e\n{_agent_script(task_dir, variant)}", user="root", timeout_sec=300)
        if result.return_code != 0:
            raise SystemExit(f"the agent's work failed: {result.stderr}")
        started = time.perf_counter()
        for _look in ("before the kill", "after it"):  # the verifier looks twice
            snap = await tamper.snapshot(env)
            verdict = await tamper.judge(snap.changes, env.image_profile, snap.files, snap.workdir)
        in_place = time.perf_counter() - started
        if verdict.findings:
            raise SystemExit(f"an honest solution was flagged: {verdict.findings}")

        started = time.perf_counter()
        snap = await tamper.snapshot(env)
        carried = _outside_system_areas(env.image_profile, [c.path for c in snap.changes if c.kind != "D"])
        merged = api_client().inspect_container(env.container_id)["GraphDriver"]["Data"]["MergedDir"]
        data = await run_blocking(_pack, merged, carried)
        room = _environment(task_dir, root, "bench-room")
        await room.start(force_build=False)
        await run_blocking(api_client().put_archive, room.container_id, "/", data)
        await room.stop(delete=True)
        clean_room = time.perf_counter() - started
    finally:
        await env.stop(delete=True)
    return {"in_place": in_place, "clean_room": clean_room, "changes": float(len(snap.changes)),
            "carried": float(len(carried))}


async def cold_probe(task_dir: Path, root: Path) -> float:
    """Seconds a sandbox start spends probing an image it has not seen (once per image and host)."""
    from rlkit.sandbox.tamper import profile as profiles

    env = _environment(task_dir, root, "bench-probe")
    saved = dict(profiles._MEMORY)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["RLKIT_CACHE_DIR"] = cache
        profiles._MEMORY.clear()
        try:
            await env.start(force_build=False)
            started = time.perf_counter()
            await profiles.ensure_profile(env, "bench:" + str(time.monotonic_ns()))
            return time.perf_counter() - started
        finally:
            await env.stop(delete=True)
            os.environ.pop("RLKIT_CACHE_DIR", None)
            profiles._MEMORY.update(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from rlkit.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
    raws: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-") as tmp:
        root = Path(tmp)
        for task_dir, variant in CASES.values():  # warm: images built and profiled, imports done
            asyncio.run(one_case(task_dir, variant, root))
        probe = asyncio.run(cold_probe(CASES["merge-intervals oracle"][0], root))
        for _ in range(args.reps):
            raws.append(asyncio.run(raw_lifecycle(CASES["merge-intervals oracle"][0], root)))
            for name, (task_dir, variant) in CASES.items():
                results[name].append(asyncio.run(one_case(task_dir, variant, root)))
    raw = statistics.median(raws)
    print(f"reps={args.reps}  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"raw sandbox lifecycle (start, exec, stop)   median {raw:.3f}s  (min {min(raws):.3f}s)")
    print(f"image probe, once per image (cold)          {probe:.3f}s = {100 * probe / raw:.0f}% of one lifecycle")
    for name, rows in results.items():
        in_place = statistics.median(r["in_place"] for r in rows)
        room = statistics.median(r["clean_room"] for r in rows)
        print(f"{name:<30} changes={rows[0]['changes']:.0f} carried={rows[0]['carried']:.0f}  "
              f"in place {1000 * in_place:6.1f} ms = {100 * in_place / raw:4.1f}%   "
              f"clean room {1000 * room:6.1f} ms = {100 * room / raw:5.1f}%   (goal: in place < 5%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
