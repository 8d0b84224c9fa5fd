"""Setup time from a fresh clone with empty package caches: uv against pip, phase by phase.

    python3 bench/setup_time.py [--runs pip-serial,uv-serial,uv-parallel,rerun,warm-clone] [--no-vllm] [--keep]

Each run clones this checkout's HEAD into a temporary folder and runs `scripts/setup.sh --no-apt` there
with PIP_CACHE_DIR and UV_CACHE_DIR pointed at new empty folders (the machine's own package caches are
never read or written). The floor is today's way, measured in the same run: pip, one venv after the other.

    pip-serial   setup.sh --pip --serial   the floor
    uv-serial    setup.sh --serial         uv, one venv at a time: the per-phase ratio uv/pip
    uv-parallel  setup.sh                  uv, both venvs at once: what the README's commands run
    rerun        setup.sh again in the uv-parallel clone: every stamp matches, so it costs seconds
    warm-clone   setup.sh in a second fresh clone, the uv cache of uv-parallel kept (a second checkout)

Each run prints its wall time and its CPU time (user + system of setup.sh and all it ran, which the
machine's other load bends less). apt is left out: its packages are installed on a machine that can
run this, and removing them would stop the shared dockerd. Each run's venvs and caches are removed
when it is measured (--keep keeps them). Needs about 15 GiB free for one run's venvs and caches.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = ("pip-serial", "uv-serial", "uv-parallel", "rerun", "warm-clone")
FLAGS = {"pip-serial": ["--pip", "--serial"], "uv-serial": ["--serial"], "uv-parallel": [], "rerun": [],
         "warm-clone": []}
DONE = re.compile(r"^\[setup\] (?P<phase>\.venv(?:-vllm)?|uv \S+) .*?(?:done|installed) in (?P<s>\d+) s")


@dataclass
class Result:
    run: str
    wall: float
    rc: int
    load: tuple[float, float]  # 1-minute load average at the start and the end
    cpu: float  # user + system seconds of setup.sh and everything it ran: less bent by the machine's load
    phases: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, float] = field(default_factory=dict)  # GB on disk
    pins: dict[str, dict[str, str]] = field(default_factory=dict)  # venv -> {package: version}


def du_gb(path: Path) -> float:
    if not path.exists():
        return 0.0
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=False).stdout
    return int(out.split()[0]) / 1e6 if out else 0.0


def setup(run: str, clone: Path, caches: Path, no_vllm: bool) -> Result:
    env = {**os.environ, "PIP_CACHE_DIR": str(caches / "pip"), "UV_CACHE_DIR": str(caches / "uv")}
    env.pop("VIRTUAL_ENV", None)
    argv = ["bash", "scripts/setup.sh", "--no-apt", *FLAGS[run], *(["--no-vllm"] if no_vllm else [])]
    print(f"\n== {run}: {' '.join(argv[1:])}  (in {clone})", flush=True)
    load0 = os.getloadavg()[0]
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    phases: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        print("   " + line, end="", flush=True)
        if match := DONE.match(line):
            phases[match["phase"].split()[0]] = float(match["s"])
    rc = proc.wait()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    result = Result(run, time.perf_counter() - start, rc, (load0, os.getloadavg()[0]), cpu, phases)
    result.sizes = {".venv": du_gb(clone / ".venv"), ".venv-vllm": du_gb(clone / ".venv-vllm"),
                    "pip cache": du_gb(caches / "pip"), "uv cache": du_gb(caches / "uv")}
    result.pins = {venv: installed(clone / venv) for venv in (".venv", ".venv-vllm")}
    print(f"   -> exit {rc} in {result.wall:.0f} s ({cpu:.0f} s CPU), load {load0:.1f} -> {result.load[1]:.1f}; "
          + ", ".join(f"{k} {v:.1f} GB" for k, v in result.sizes.items() if v), flush=True)
    return result


def installed(venv: Path) -> dict[str, str]:
    """{normalized name: version} of what a venv holds (pip and the project itself left out)."""
    if not (venv / "bin" / "python").exists():
        return {}
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze",
                          "--disable-pip-version-check"], capture_output=True, text=True, check=False).stdout
    pins = {}
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        name = re.sub(r"[-_.]+", "-", name).lower()
        if sep and name not in ("pip", "setuptools", "wheel", "rlkit"):
            pins[name] = version
    return pins


def pin_diff(floor: dict[str, str], other: dict[str, str]) -> list[str]:
    return [f"{name} {floor.get(name, '-')} -> {other.get(name, '-')}"
            for name in sorted(set(floor) | set(other)) if floor.get(name) != other.get(name)]


def fresh_clone(work: Path, name: str) -> Path:
    clone = work / name
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    return clone


def remove(*paths: Path) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:5.2f}" if num and den else "    -"


def report(results: dict[str, Result]) -> None:
    print("\nphase (fresh clone, empty caches)   pip serial   uv serial   uv parallel   uv/pip")
    floor = results.get("pip-serial")
    for phase in ("uv", ".venv", ".venv-vllm"):
        cells = [results[r].phases.get(phase) if r in results else None for r in ("pip-serial", "uv-serial",
                                                                                   "uv-parallel")]
        if not any(cells):
            continue
        text = "  ".join(f"{c:9.0f} s" if c else "          -" for c in cells)
        print(f"{phase:<36}{text}   {ratio(cells[1] or cells[2], cells[0])}")
    walls = {r: results[r].wall for r in ("pip-serial", "uv-serial", "uv-parallel") if r in results}
    text = "  ".join(f"{walls[r]:9.0f} s" if r in walls else "          -"
                     for r in ("pip-serial", "uv-serial", "uv-parallel"))
    best_uv = walls.get("uv-parallel") or walls.get("uv-serial")
    print(f"{'whole setup.sh --no-apt':<36}{text}   {ratio(best_uv, floor.wall if floor else None)}")
    cpus = {r: results[r].cpu for r in walls}
    text = "  ".join(f"{cpus[r]:9.0f} s" if r in cpus else "          -"
                     for r in ("pip-serial", "uv-serial", "uv-parallel"))
    best_uv = cpus.get("uv-parallel") or cpus.get("uv-serial")
    print(f"{'  its CPU time (user + system)':<36}{text}   {ratio(best_uv, floor.cpu if floor else None)}")
    for run, what in (("rerun", "setup.sh again (stamps match)"), ("warm-clone", "fresh clone, uv cache warm")):
        if run in results:
            print(f"{what:<36}{results[run].wall:9.1f} s   ({ratio(results[run].wall, floor.wall if floor else None)}"
                  f" of the floor; {results[run].cpu:.0f} s CPU)")
    if floor:
        for run in ("uv-serial", "uv-parallel"):
            for venv in (".venv", ".venv-vllm") if run in results else ():
                if floor.pins.get(venv) and results[run].pins.get(venv):
                    diff = pin_diff(floor.pins[venv], results[run].pins[venv])
                    print(f"{venv} by {run} against pip: {len(results[run].pins[venv])} packages, "
                          f"{len(diff)} differ{': ' if diff else ''}{', '.join(diff)}")
    for run, r in results.items():
        print(f"  {run:<12} exit {r.rc}, load {r.load[0]:.1f} -> {r.load[1]:.1f}, "
              + ", ".join(f"{k} {v:.1f} GB" for k, v in r.sizes.items() if v))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}")
    parser.add_argument("--no-vllm", action="store_true", help="only .venv")
    parser.add_argument("--keep", action="store_true", help="keep the clones, venvs and caches")
    parser.add_argument("--workdir", type=Path, help="where the clones and caches go (default: a new temp dir)")
    args = parser.parse_args()
    runs = [r for r in args.runs.split(",") if r]
    if unknown := [r for r in runs if r not in RUNS]:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "scripts/setup.sh", "pyproject.toml"],
                      cwd=REPO, check=False).returncode:
        print("note: scripts/setup.sh or pyproject.toml has uncommitted changes; the clones run HEAD's")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="rlkit-setup-bench-", dir=REPO.parent))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    results: dict[str, Result] = {}
    parallel_clone: Path | None = None
    try:
        for run in runs:
            if run == "rerun":
                if parallel_clone is None:
                    print("rerun needs uv-parallel before it; skipped")
                    continue
                results[run] = setup(run, parallel_clone, work / "caches-uv-parallel", args.no_vllm)
                continue
            clone = fresh_clone(work, run)
            caches = work / ("caches-uv-parallel" if run == "warm-clone" else f"caches-{run}")
            if run == "warm-clone" and not caches.exists():
                print("warm-clone needs uv-parallel's cache (run uv-parallel first); skipped")
                remove(clone)
                continue
            results[run] = setup(run, clone, caches, args.no_vllm)
            if run == "uv-parallel":
                parallel_clone = clone
            elif not args.keep:
                remove(clone, caches)
        report(results)
    finally:
        if not args.keep:
            remove(work)
    return 0 if all(r.rc == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
