"""Grow the task set: disk and preparation time per task with the agent mounted against baked.

    .venv/bin/python bench/task_scale.py [--n 10 100] [--agents cc oc ohsdk] [--bake-max 10] [--check-max 10]
                                         [--starts 5] [--step 4] [--keep]

For each N it generates N tasks from the bundled ones (examples/tasks, round robin: a new name, a new
constant in the project's code, the same base image), then runs the real commands and times them:
`rlkit index build`, `rlkit images build` (the task images), `rlkit images build --scaffold A` (mounted:
the agent's image and its one volume) and `--scaffold A --bake` (a layer on every task image, for N up
to --bake-max: each ohsdk layer stores 0.57 GiB), `rlkit tasks check` (oracle and no-op on every task,
for N up to --check-max), and one step's sandbox starts (--step sandboxes at once, each ready to run its
agent: started, profiled, linked, and the agent's own version command answered), mounted and baked.
Disk is what docker stores for it: each task image's layers above the base, each baked layer above its
task image, the agent's volume once. The slope is the cost of one more task between two N; sizes past
what was run are extrapolated on that slope, and the table says which rows are.

Then a trial's start, mounted against baked, in the same run (--starts each, interleaved; the goal is
within 5%). Every image, volume and folder it makes is removed at the end, unless --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "examples" / "tasks"
RLKIT = [sys.executable, "-m", "rlkit"]
GIB = 1024 ** 3
VERSION_COMMANDS = {"cc": "claude --version", "oc": "opencode --version",
                    "ohsdk": "/opt/openhands-sdk-venv/bin/python -c 'import openhands.sdk'"}


def generate(n: int, root: Path, tag: str) -> list[Path]:
    """N task dirs from the bundled ones: a new name and a new constant each, the same base image."""
    sources = sorted(p for p in BUNDLED.iterdir() if (p / "task.toml").is_file())
    tasks = []
    for i in range(n):
        source = sources[i % len(sources)]
        task = root / f"scale-{tag}-{i:04d}-{source.name}"
        shutil.copytree(source, task)
        module = min((task / "environment" / "app").rglob("*.py"))
        with module.open("a") as f:
            f.write(f"\n_SCALE_VARIANT = {i}  # bench/task_scale.py: a task of its own\n")
        tasks.append(task)
    return tasks


def timed(cmd: list[str], timeout: float = 3600) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return wall, proc.stdout + proc.stderr


def image_size(api, ref: str) -> int:
    return int(api.inspect_image(ref)["Size"])


def volume_bytes(volume: str) -> int:
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{volume}:/agent:ro",
                          "rlkit/base:bookworm", "du", "-sb", "/agent"], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def task_refs(tasks: list[Path]) -> list[str]:
    from rlkit.tasks.images import read_task_spec

    return [read_task_spec(t).image for t in tasks]


async def ready_sandbox(task: Path, root: Path, agent: str, delivery: str) -> float:
    """One sandbox as a trial gets it, ready for its agent: started (mounted: its volume and links) and the
    agent's version command (what harbor runs before an installed agent) answered. Seconds."""
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    from rlkit.sandbox.docker import DockerEnvironment
    from rlkit.scaffolds import get_scaffold
    from rlkit.tasks.images import read_task_spec, task_image_ref

    harbor_task = Task(task)
    paths = TrialPaths(trial_dir=root / f"start-{uuid.uuid4().hex[:8]}")
    paths.mkdir()
    kwargs = get_scaffold(agent).environment_kwargs("docker", delivery)
    spec = read_task_spec(task)
    image = spec.image if kwargs["image_variant"] == "latest" else task_image_ref(spec.task_id, variant=agent)
    env = DockerEnvironment(environment_dir=harbor_task.paths.environment_dir, environment_name=task.name,
                            session_id=f"bench-scale-{uuid.uuid4().hex[:6]}", trial_paths=paths,
                            task_env_config=harbor_task.config.environment, image=image, network="none",
                            build_missing=False, project="bench-task-scale",
                            agent_mount=kwargs.get("agent_mount"))
    started = time.perf_counter()
    try:
        await env.start(force_build=False)
        result = await env.exec(f"bash -lc {json.dumps(VERSION_COMMANDS[agent])}", user="root", timeout_sec=300)
        if result.return_code != 0:
            raise SystemExit(f"{agent} ({delivery}) does not answer in {image}: {result.stderr}")
        return time.perf_counter() - started
    finally:
        await env.stop(delete=True)


async def step_starts(tasks: list[Path], root: Path, agent: str, delivery: str, width: int) -> float:
    """One step's sandbox starts: `width` sandboxes of different tasks at once; the step's wall seconds."""
    started = time.perf_counter()
    await asyncio.gather(*(ready_sandbox(t, root, agent, delivery) for t in tasks[:width]))
    return time.perf_counter() - started


def run_n(n: int, args: argparse.Namespace, work: Path, tag: str, made: dict[str, set[str]]) -> list[dict]:
    from rlkit.sandbox import agent_volume
    from rlkit.sandbox.docker_api import api_client
    from rlkit.scaffolds import get_scaffold
    from rlkit.scaffolds.bake import agent_mount, scaffold_image_ref

    api = api_client()
    root = work / f"n{n}"
    tasks = generate(n, root / "tasks", f"{tag}{n}")
    refs = task_refs(tasks)
    rows: list[dict] = []
    seconds, _ = timed([*RLKIT, "index", "build", str(root / "tasks"), "-o", str(root / "index.parquet")])
    rows.append({"n": n, "what": "index build", "seconds": seconds, "bytes": (root / "index.parquet").stat().st_size})
    seconds, _ = timed([*RLKIT, "images", "build", str(root / "tasks"), "--no-base"])
    made["images"].update(refs)
    base = image_size(api, "rlkit/base:bookworm")
    task_bytes = sum(image_size(api, ref) - base for ref in refs)
    rows.append({"n": n, "what": "task images", "seconds": seconds, "bytes": task_bytes})
    if n <= args.check_max:
        seconds, _ = timed([*RLKIT, "tasks", "check", str(root / "tasks"), "--concurrency", str(args.step)])
        rows.append({"n": n, "what": "tasks check", "seconds": seconds, "bytes": 0})
    for agent in args.agents:
        seconds, _ = timed([*RLKIT, "images", "build", str(root / "tasks"), "--no-base", "--scaffold", agent])
        mount = agent_mount(get_scaffold(agent))
        volume = agent_volume.volume_name(mount, api.inspect_image(mount.image)["Id"])
        rows.append({"n": n, "what": f"{agent} mounted", "seconds": seconds, "bytes": volume_bytes(volume),
                     "once": True})
        deliveries = ["mount"]
        if n <= args.bake_max:
            seconds, _ = timed([*RLKIT, "images", "build", str(root / "tasks"), "--no-base", "--scaffold", agent,
                                "--bake"])
            baked = [scaffold_image_ref(ref, agent) for ref in refs]
            made["images"].update(baked)
            layers = sum(image_size(api, b) - image_size(api, r) for b, r in zip(baked, refs, strict=True))
            rows.append({"n": n, "what": f"{agent} baked", "seconds": seconds, "bytes": layers})
            deliveries.append("bake")
        # Cold: each image's first sandbox probes its profile (a baked image is an image of its own) and reads
        # the agent from disk; warm: the next step. Alternated, so both see the same machine.
        for rnd, label in enumerate(("step start, cold", "step start")):
            for delivery in deliveries if rnd % 2 == 0 else deliveries[::-1]:
                step = asyncio.run(step_starts(tasks, root, agent, delivery, args.step))
                name = "mounted" if delivery == "mount" else "baked"
                rows.append({"n": n, "what": f"{agent} {name}: {label}", "seconds": step, "bytes": 0,
                             "count": min(n, args.step)})
    return rows


def start_pair(task: Path, root: Path, agent: str, reps: int) -> dict[str, float]:
    """A trial's start mounted and baked, interleaved in one run (the first of each discarded: page cache)."""
    times: dict[str, list[float]] = {"mount": [], "bake": []}
    for rep in range(reps + 1):
        for delivery in ("mount", "bake") if rep % 2 else ("bake", "mount"):
            seconds = asyncio.run(ready_sandbox(task, root, agent, delivery))
            if rep:
                times[delivery].append(seconds)
    return {k: statistics.median(v) for k, v in times.items()}


def report(rows: list[dict], ns: list[int]) -> list[str]:
    header = f"{'what':<32} {'N':>6} {'seconds':>9} {'s/task':>8} {'GiB':>9} {'MiB/task':>9}  note"
    lines = [header + " (step start: s/task is per sandbox of the step)"]
    by_what: dict[str, dict[int, dict]] = {}
    for row in rows:
        by_what.setdefault(row["what"], {})[row["n"]] = row
    for what, found in by_what.items():
        for n, row in sorted(found.items()):
            lines.append(f"{what:<32} {n:>6} {row['seconds']:>9.1f} {row['seconds'] / row.get('count', n):>8.2f} "
                         f"{row['bytes'] / GIB:>9.3f} {row['bytes'] / n / 2**20:>9.2f}  measured"
                         + ("; stored once" if row.get("once") else ""))
        points = sorted(found)
        if len(points) >= 2:
            (n0, r0), (n1, r1) = (points[0], found[points[0]]), (points[-1], found[points[-1]])
            slope_s, slope_b = (r1["seconds"] - r0["seconds"]) / (n1 - n0), (r1["bytes"] - r0["bytes"]) / (n1 - n0)
        else:
            n0, r0 = points[0], found[points[0]]
            slope_s, slope_b = r0["seconds"] / n0, r0["bytes"] / n0  # through zero: one point
        if "step start" in what or what == "tasks check":
            continue  # a step starts --step sandboxes whatever N; check is per task already
        once = bool(r0.get("once"))
        flat = slope_s < 0  # a smaller second figure: the first N paid a fixed cost (noise on a shared machine)
        if flat:
            slope_s = r1["seconds"] / n1 if len(points) >= 2 else 0.0
            n0, r0 = n1, r1
        for n in (100, 1000):
            if n in found or n < max(points):
                continue
            seconds = r0["seconds"] + slope_s * (n - n0)
            size = r0["bytes"] if once else r0["bytes"] + slope_b * (n - n0)
            lines.append(f"{what:<32} {n:>6} {seconds:>9.0f} {seconds / n:>8.2f} {size / GIB:>9.3f} "
                         f"{size / n / 2**20:>9.2f}  EXTRAPOLATED (slope {slope_s:.2f} s"
                         f"{' (the largest N per task: its time fell as N grew)' if flat else ''}, "
                         f"{(0 if once else slope_b) / 2**20:.1f} MiB a task)")
    return lines


def cleanup(tag: str) -> None:
    """Every tag this run made (its task names carry `tag`: nobody else's image matches)."""
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                             f"reference=rlkit-task/scale-{tag}*"], capture_output=True, text=True, check=False)
    refs = listed.stdout.split()
    if refs:
        subprocess.run(["docker", "rmi", "-f", *refs], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[10])
    parser.add_argument("--agents", nargs="+", default=["cc", "oc", "ohsdk"])
    parser.add_argument("--bake-max", type=int, default=10, help="bake only up to this N (disk)")
    parser.add_argument("--check-max", type=int, default=10, help="rlkit tasks check only up to this N (time)")
    parser.add_argument("--step", type=int, default=4, help="sandboxes a step starts at once")
    parser.add_argument("--starts", type=int, default=5, help="trial starts of each kind, mounted vs baked")
    parser.add_argument("--keep", action="store_true", help="keep the generated tasks and images")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlkit-task-scale-"))
    tag = uuid.uuid4().hex[:4]
    made: dict[str, set[str]] = {"images": set()}
    rows: list[dict] = []
    pairs: dict[str, dict[str, float]] = {}
    try:
        for n in sorted(args.n):
            rows += run_n(n, args, work, tag, made)
            print(f"… N={n} done", file=sys.stderr, flush=True)
        smallest = min(args.n)
        if smallest <= args.bake_max:
            first = min((work / f"n{smallest}" / "tasks").iterdir())
            for agent in args.agents:
                pairs[agent] = start_pair(first, work, agent, args.starts)
    finally:
        if not args.keep:
            cleanup(tag)
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report(rows, sorted(args.n))))
    for agent, pair in pairs.items():
        ratio = pair["mount"] / pair["bake"]
        print(f"trial start, {agent}: mounted {pair['mount']:.2f} s, baked {pair['bake']:.2f} s (median of "
              f"{args.starts}): {ratio:.3f}x ({'within' if abs(ratio - 1) <= 0.05 else 'outside'} 5%)")
    print(json.dumps({"rows": rows, "trial_start": pairs}))


if __name__ == "__main__":
    main()
