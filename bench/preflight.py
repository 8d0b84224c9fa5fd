"""Preflight timing: `rlkit check examples/configs/embedded.env`, cold and warm, against a
bare `python -c pass` measured in the same run.

    .venv/bin/python bench/preflight.py [--cold N] [--warm N]

Cold: an empty verdict cache, so the tool-call parser probe subprocess (transformers +
verl) runs. Warm: the cached verdict; nothing heavy is imported or spawned. Goal: warm
<= 1.5 s on a 2-core machine. Prints medians and ratios against the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "examples/configs/embedded.env"
RLKIT = [sys.executable, "-m", "rlkit.cli.main"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start, proc.returncode


def prepare(env: dict[str, str]) -> None:
    """The embedded default's inputs: the tiny model and the task indexes."""
    if not (REPO / ".rlkit/models/tiny-qwen3/config.json").is_file():
        subprocess.run([*RLKIT, "model", "tiny", ".rlkit/models/tiny-qwen3"], cwd=REPO, env=env, check=True)
    for split in ("train", "val"):
        out = REPO / f".rlkit/indexes/{split}.parquet"
        if not out.is_file():
            subprocess.run([*RLKIT, "index", "build", "examples/tasks", "-o", str(out), "--split", split,
                            "--val-fraction", "0.3"], cwd=REPO, env=env, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--warm", type=int, default=7)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_ONLY", "DRY_RUN")}
    prepare(env)
    floor = [timed([sys.executable, "-c", "pass"], env)[0] for _ in range(args.warm)]
    with tempfile.TemporaryDirectory() as tmp:
        cold = []
        for i in range(args.cold):
            seconds, _ = timed([*RLKIT, "check", CONFIG], {**env, "RLKIT_CACHE_DIR": f"{tmp}/cold{i}"})
            cold.append(seconds)
        warm_env = {**env, "RLKIT_CACHE_DIR": f"{tmp}/cold0"}
        warm, codes = zip(*(timed([*RLKIT, "check", CONFIG], warm_env) for _ in range(args.warm)), strict=True)
    f, c, w = statistics.median(floor), statistics.median(cold), statistics.median(warm)
    print(f"python -c pass      median {f:6.3f} s  (n={len(floor)})")
    print(f"rlkit check  cold   median {c:6.3f} s  (n={len(cold)})  {c / f:5.1f}x floor   parser probe runs")
    print(f"rlkit check  warm   median {w:6.3f} s  (n={len(warm)})  {w / f:5.1f}x floor   cached verdict")
    print(f"warm goal <= 1.5 s: {'met' if w <= 1.5 else 'MISSED'}   (exit code of check: {codes[0]}; "
          "1 means a FATAL finding such as no docker daemon, timing is unaffected)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
