"""Preflight timing: `rlkit check` on the embedded default, cold and warm, against a bare
`python -c pass` measured in the same run.

    .venv/bin/python bench/preflight.py [--cold N] [--warm N]

Cold: an empty verdict cache, so the tool-call parser probe subprocess runs (its light path:
verl's parsers without verl's package imports, no transformers). Warm: the cached verdict;
nothing heavy is imported or spawned. The probe alone is timed both ways too: light, and
`--full` (transformers' AutoTokenizer and `import verl`, what every cold check ran before).
Goals on a 2-core machine: cold <= 3 s, warm <= 1.5 s. Prints medians, ratios to the floor,
CPU seconds (user + sys, steadier than wall time on a shared machine) and the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "examples/configs/embedded.env"
RLKIT = [sys.executable, "-m", "rlkit.cli.main"]
BASE_MODEL = ".rlkit/models/tiny-qwen3"
SFT_MODEL = ".rlkit/models/tiny-qwen3-sft"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and its children, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, proc.returncode


def prepare(env: dict[str, str], tmp: Path) -> str:
    """The embedded default's inputs: the tiny model and the task indexes. Returns the config to check:
    the embedded one, or a copy pointing at the base tiny model when the warm-started one was never
    built (same tokenizer and chat template, so the same probe)."""
    if not (REPO / BASE_MODEL / "config.json").is_file():
        subprocess.run([*RLKIT, "model", "tiny", BASE_MODEL], cwd=REPO, env=env, check=True)
    for split in ("train", "val"):
        out = REPO / f".rlkit/indexes/{split}.parquet"
        if not out.is_file():
            subprocess.run([*RLKIT, "index", "build", "examples/tasks", "-o", str(out), "--split", split,
                            "--val-fraction", "0.3"], cwd=REPO, env=env, check=False)
    if (REPO / SFT_MODEL / "config.json").is_file():
        return CONFIG
    lines = [f"MODEL_PATH={BASE_MODEL}" if line.startswith("MODEL_PATH=") else line
             for line in (REPO / CONFIG).read_text().splitlines()]
    copy = tmp / "embedded.env"  # relative paths resolve against the working directory, REPO
    copy.write_text("\n".join(lines) + "\n")
    print(f"{SFT_MODEL} is not built: checking {CONFIG} with MODEL_PATH={BASE_MODEL}")
    return str(copy)


def row(name: str, runs: list[tuple[float, float, int]], floor: float, note: str) -> float:
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(f"{name:<22} median {wall:6.3f} s  {wall / floor:6.1f}x floor   cpu {cpu:5.2f} s  (n={len(runs)})  {note}")
    return wall


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--warm", type=int, default=7)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFLIGHT_ONLY", "DRY_RUN")}
    load_before = load()
    with tempfile.TemporaryDirectory(prefix="rlkit-bench-preflight-") as tmp:
        config = prepare(env, Path(tmp))
        model = SFT_MODEL if config == CONFIG else BASE_MODEL
        probe = [sys.executable, "-m", "rlkit.proxy.parsers"]
        floor, cold, warm, light, full = [], [], [], [], []
        for i in range(max(args.cold, args.warm)):  # interleaved, so a change in load hits every row alike
            floor.append(timed([sys.executable, "-c", "pass"], env))
            if i < args.cold:
                cold.append(timed([*RLKIT, "check", config], {**env, "RLKIT_CACHE_DIR": f"{tmp}/cold{i}"}))
                light.append(timed([*probe, model, "qwen3_coder"], env))
                full.append(timed([*probe, "--full", model, "qwen3_coder"], env))
            if i < args.warm:
                warm.append(timed([*RLKIT, "check", config], {**env, "RLKIT_CACHE_DIR": f"{tmp}/cold0"}))
    f = statistics.median(r[0] for r in floor)
    row("python -c pass", floor, f, "the floor")
    c = row("rlkit check  cold", cold, f, "empty cache: the parser probe runs")
    w = row("rlkit check  warm", warm, f, "cached verdict")
    row("parser probe  light", light, f, "verl's parsers, jinja2 + tokenizers")
    row("parser probe  --full", full, f, "transformers + import verl (the probe before)")
    print(f"load average (1, 5, 15 min): {load_before} before, {load()} after, on {os.cpu_count()} CPU(s)")
    print(f"cold goal <= 3 s: {'met' if c <= 3 else 'MISSED'}   warm goal <= 1.5 s: {'met' if w <= 1.5 else 'MISSED'}"
          f"   (exit code of check: {cold[0][2]}; 1 means a FATAL finding such as no docker daemon, "
          "timing is unaffected)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
