"""`rlkit status` on a run whose logs/<exp>_attempts.jsonl ends in a torn line of --mb MB, against the same run
with a clean attempts file.

Copies the recorded crashed run (tests/monitor/fixtures/crashed) into two temp dirs; in one, the attempts file
holds a marker line and then a line of --mb MB with no newline (a killed writer, or someone filling a shared
OUTPUT_DIR). Times the whole `rlkit status EXP --root DIR --json` command on each (median of --reps).
`--src DIR` puts another checkout's rlkit first on PYTHONPATH (e.g. `git archive main rlkit | tar -x -C DIR`),
to time the code before the change on the same files. Goal: torn within 2x of clean.
.venv/bin/python bench/status_torn_line.py [--mb 100] [--reps 3] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "monitor" / "fixtures" / "crashed"
EXP = "fx-crash"


def make_run(root: Path, torn_mb: int) -> None:
    shutil.copytree(FIXTURE, root)
    marker = json.dumps({"event": "attempt", "attempt": 1, "from_step": 0, "total_steps": 2, "pid": 1})
    with open(root / "logs" / f"{EXP}_attempts.jsonl", "wb") as f:
        f.write(marker.encode() + b"\n")
        if torn_mb:
            f.write(b'{"event": "attempt", "note": "')
            chunk = b"x" * (1 << 20)
            f.writelines(chunk for _ in range(torn_mb))


def time_status(root: Path, src: str | None, reps: int) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, str(REPO)) if p)}
    times, out = [], ""
    for _ in range(reps):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rlkit.cli.main", "status", EXP, "--root", str(root), "--json"],
                              capture_output=True, text=True, env=env, check=False, timeout=900, cwd=root)
        times.append(time.perf_counter() - t)
        out = (proc.stdout + proc.stderr)[-300:]
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--src", help="a folder holding another rlkit/ to time instead of this checkout's")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlkit-bench-torn-"))
    try:
        make_run(tmp / "clean", 0)
        make_run(tmp / "torn", args.mb)
        clean, _ = time_status(tmp / "clean", args.src, args.reps)
        torn, out = time_status(tmp / "torn", args.src, args.reps)
        print(f"rlkit status, clean attempts file:        {clean:.2f} s")
        print(f"rlkit status, {args.mb} MB torn line at its end: {torn:.2f} s  ({torn / clean:.1f}x clean)")
        print(f"last output of the torn run: {out.strip()[-200:]!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
