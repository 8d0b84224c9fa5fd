"""The proxy's start: `rlkit proxy serve` from launch to listening, on the light tokenizer (the model's
tokenizer.json and chat template through `tokenizers` + jinja2) against transformers' AutoTokenizer, the
floor, measured in the same run, alternating.

    .venv/bin/python bench/proxy_start.py [--rounds 5] [--model .rlkit/models/tiny-qwen3]

Each start is the command a run's launcher gives (`rlkit.launch.proxy_process.serve_command`, no Anthropic
warm-up, as for terminus), timed from the launch to its "rlkit proxy on" line, with the process's CPU
seconds then. The floor forces transformers' tokenizer (the light path made to refuse). Every run,
eval, rollout and inference start pays it once; the test suite starts ~25 proxies.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FORCE_TRANSFORMERS = ("import runpy, sys, rlkit.proxy._light_tokenizer as light\n"
                      "def refuse(*args, **kwargs):\n"
                      "    raise light.NeedsTransformers('forced by bench/proxy_start.py')\n"
                      "light.light_tokenizer = refuse\n"
                      "sys.argv = ['rlkit', *sys.argv[1:]]\n"
                      "runpy.run_module('rlkit.cli.main', run_name='__main__')\n")


def start(model: str, light: bool) -> tuple[float, float]:
    """(seconds to listening, cpu-s of the proxy process then)."""
    from rlkit.launch.proxy_process import serve_command
    from rlkit.proxy.core import ProxyConfig

    cmd = serve_command(ProxyConfig(model_path=model, upstreams=["http://127.0.0.1:9"], port=0,
                                    warm_anthropic=False))
    if not light:
        cmd = [cmd[0], "-c", FORCE_TRANSFORMERS, *cmd[3:]]  # python -m rlkit.cli.main ARGS -> python -c ... ARGS
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("rlkit proxy on http"):
                break
        else:
            raise SystemExit(f"the proxy exited ({proc.wait()}) before listening: {' '.join(cmd)}")
        wall = time.perf_counter() - started
        times = psutil.Process(proc.pid).cpu_times()
        return wall, times.user + times.system
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default=str(REPO / ".rlkit" / "models" / "tiny-qwen3"))
    args = parser.parse_args()
    if not Path(args.model, "tokenizer.json").is_file():
        from rlkit.embedded.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.model))
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for i in range(args.rounds):
        for light in ((True, False) if i % 2 == 0 else (False, True)):
            runs[light].append(start(args.model, light))
            wall, cpu = runs[light][-1]
            print(f"round {i + 1} {'light       ' if light else 'transformers'}: {wall:5.2f} s, {cpu:5.2f} cpu-s",
                  flush=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(f"\nmedian of {args.rounds}: transformers (floor) {med[False][0]:.2f} s / {med[False][1]:.2f} cpu-s, "
          f"light {med[True][0]:.2f} s / {med[True][1]:.2f} cpu-s: "
          f"{med[True][0] / med[False][0]:.2f}x the wall, {med[True][1] / med[False][1]:.2f}x the CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
