"""Python API start-up: `import rlkit`, and `import rlkit; rlkit.check(CFG, ...)` on the warm path, against a
bare `python -c pass` measured in the same run.

    .venv/bin/python bench/api_import.py [--reps 9]

The check is the embedded default with MODEL_PATH given as a keyword override (the tiny policy that
`rlkit model tiny` builds, so no warm start is needed); warm means the tool-call parser probe's
verdict is cached (one untimed check fills the cache first), so nothing heavy is imported or spawned.
Goal: each at most 0.5 s more than the floor on a 2-core machine. Prints medians, the difference to
the floor and the ratio.
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
MODEL = ".rlkit/models/tiny-qwen3"
GOAL_S = 0.5


def timed(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def prepare(env: dict[str, str]) -> None:
    """The embedded default's inputs: the tiny model and the task indexes."""
    rlkit = [sys.executable, "-m", "rlkit.cli.main"]
    if not (REPO / MODEL / "config.json").is_file():
        subprocess.run([*rlkit, "model", "tiny", MODEL], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    for split in ("train", "val"):
        if not (REPO / f".rlkit/indexes/{split}.parquet").is_file():
            subprocess.run([*rlkit, "index", "build", "examples/tasks", "-o", f".rlkit/indexes/{split}.parquet",
                            "--split", split, "--val-fraction", "0.3"], cwd=REPO, env=env, check=True,
                           stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_ONLY", "DRY_RUN")}
    prepare(env)
    check = (f"import rlkit; r = rlkit.check({CONFIG!r}, MODEL_PATH={MODEL!r}); "
             "assert r.resolved.layer('MODEL_PATH').value == 'override'")
    with tempfile.TemporaryDirectory() as cache:
        env["RLKIT_CACHE_DIR"] = cache
        timed(check, env)  # fills the parser-probe verdict cache: the runs below are warm
        floor, imported, checked = [], [], []
        for _ in range(args.reps):  # interleaved, so load on a shared machine hits all three alike
            floor.append(timed("pass", env))
            imported.append(timed("import rlkit", env))
            checked.append(timed(check, env))
    f = statistics.median(floor)
    print(f"python -c pass                      median {f:6.3f} s  (n={len(floor)})")
    verdicts = []
    for name, runs in (("import rlkit", imported), ("import rlkit; rlkit.check(...)", checked)):
        m = statistics.median(runs)
        verdicts.append(m - f <= GOAL_S)
        print(f"{name:<35} median {m:6.3f} s  +{m - f:5.3f} s  {m / f:5.1f}x floor")
    print(f"goal: at most +{GOAL_S} s over the floor: {'met' if all(verdicts) else 'MISSED'}  "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
