"""`rlkit status` on a 1 GB console log against `tail -n 200` of the same file.

Writes a verl-style logs/<exp>.log of --gib GiB in a temp dir (Ray-prefixed noise lines with a
step line every ~2,000 lines, the way a long run's redirected stdout looks), then times, each
the median of --reps runs: `tail -n 200 FILE`, the whole `rlkit status EXP --root DIR` command,
and the in-process reader (`collect`). Goal: the status command ≤ 3× tail. The temp dir is removed.
.venv/bin/python bench/status_big_log.py [--gib 1] [--reps 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOISE = ("(TaskRunner pid=41210) (vLLMHttpServer pid=41533) INFO 11-30 09:12:01 [loggers.py:335] Engine 000: "
         "Avg prompt throughput: 2212.4 tokens/s, Avg generation throughput: 1432.7 tokens/s, Running: 48 reqs\n")


def step_line(step: int) -> str:
    metrics = {"critic/rewards/mean": f"np.float64({0.1 + step * 1e-4})", "actor/entropy": "np.float64(0.52)",
               "actor/kl_loss": "np.float64(0.001)", "timing_s/gen": "np.float64(1310.2)",
               "timing_s/step": "np.float64(1702.5)", "training/global_step": f"np.int64({step})"}
    return f"(TaskRunner pid=41210) step:{step} - " + " - ".join(f"{k}:{v}" for k, v in metrics.items()) + "\n"


def write_log(path: Path, size: int) -> int:
    block_lines = 2000
    block = NOISE * block_lines
    step = 0
    with open(path, "w") as f:
        while f.tell() < size:
            step += 1
            f.write(step_line(step))
            f.write(block)
    return step


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlkit-bench-status-"))
    try:
        (tmp / "logs").mkdir()
        log = tmp / "logs" / "bench.log"
        t = time.perf_counter()
        steps = write_log(log, int(args.gib * 2**30))
        print(f"wrote {log.stat().st_size / 2**30:.2f} GiB, {steps} steps in {time.perf_counter() - t:.1f}s")
        rlkit = str(Path(sys.executable).with_name("rlkit"))
        tail = median_time(lambda: subprocess.run(["tail", "-n", "200", str(log)], stdout=subprocess.DEVNULL,
                                                  check=True), args.reps)
        status = median_time(lambda: subprocess.run([rlkit, "status", "bench", "--root", str(tmp)],
                                                    stdout=subprocess.DEVNULL, check=True), args.reps)
        floor = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.reps)
        from rlkit.monitor.run import locate
        from rlkit.monitor.status import collect

        got = collect(locate("bench", tmp))
        assert got.last_step == steps and got.first_step == 1, (got.last_step, got.first_step)
        reader = median_time(lambda: collect(locate("bench", tmp)), args.reps)
        print(f"tail -n 200             {tail * 1e3:8.1f} ms")
        print(f"python -c pass (floor)  {floor * 1e3:8.1f} ms")
        print(f"rlkit status (command)  {status * 1e3:8.1f} ms   {status / tail:6.1f}x tail   "
              f"{status / floor:4.1f}x a bare python start")
        print(f"status reader in-process{reader * 1e3:8.1f} ms   {reader / tail:6.1f}x tail   (goal <= 3x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
