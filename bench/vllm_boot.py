"""vLLM start-up on the CPU: the engine core forked from the API server (rlkit's launcher) against
vLLM's own spawn, measured in the same run, alternating.

    .venv/bin/python bench/vllm_boot.py [--rounds 3] [--model .rlkit/models/tiny-qwen3]

Each boot is a `VllmServer` as rlkit starts it (the tiny policy, 40,960-token window), timed from
the launch to a healthy /health, with the CPU seconds of its process tree until then (psutil every
0.1 s). After each boot the same 8 greedy completions are sent: both ways must return the same
text, or the run fails. Prints medians and the ratio fork / spawn (the floor is spawn, vLLM's CPU
default). Every server start pays it: the test suite starts ~25, a quickstart 3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from cpu_ledger import tree_cpu_s  # bench/, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def boot(model: str, fork: bool, work: Path) -> tuple[float, float, list[str]]:
    """(seconds to healthy, cpu-s of the server's processes until then, 8 greedy completions)."""
    from rlkit.launch.vllm import VllmServer, VllmServerConfig

    config = VllmServerConfig(model_path=model, exp_name=f"boot-{'fork' if fork else 'spawn'}",
                              served_model_name="tiny", max_model_len=40960, log_dir=work / "logs",
                              scratch_dir=work / "scratch", fork_engine_core=fork)
    cpu: dict[int, float] = {}
    done = threading.Event()
    start = time.perf_counter()
    server = VllmServer(config).start()
    root = psutil.Process(server.process.pid)  # type: ignore[union-attr]

    def sample() -> None:
        while not done.wait(0.1):
            cpu.update((proc.pid, used) for proc, used in tree_cpu_s(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        server.wait_ready()
        ready = time.perf_counter() - start
        done.set()
        sampler.join()
        texts = []
        for i in range(8):
            body = {"model": "tiny", "prompt": f"def f{i}(x):", "max_tokens": 64, "temperature": 0}
            request = urllib.request.Request(server.base_url + "/v1/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as resp:
                texts.append(json.load(resp)["choices"][0]["text"])
    finally:
        done.set()
        server.stop()
    return ready, sum(cpu.values()), texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=str(REPO / ".rlkit" / "models" / "tiny-qwen3"))
    args = parser.parse_args()
    if not Path(args.model).is_dir():
        from rlkit.embedded.tiny_model import build_tiny_model

        build_tiny_model(Path(args.model))
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    answers: dict[bool, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-boot-") as tmp:
        boot(args.model, True, Path(tmp))  # one unmeasured start: vLLM's caches and the page cache warm
        for round_ in range(args.rounds):
            for fork in (False, True) if round_ % 2 == 0 else (True, False):
                ready, cpu, texts = boot(args.model, fork, Path(tmp))
                results[fork].append((ready, cpu))
                answers.setdefault(fork, texts)
                print(f"round {round_ + 1} {'fork ' if fork else 'spawn'}: ready {ready:5.1f} s, {cpu:5.1f} cpu-s",
                      flush=True)
    same = answers[True] == answers[False]
    med = {fork: (statistics.median(r for r, _ in rows), statistics.median(c for _, c in rows))
           for fork, rows in results.items()}
    print(f"spawn (vLLM's CPU default, the floor): ready {med[False][0]:.1f} s, {med[False][1]:.1f} cpu-s")
    print(f"fork  (rlkit's launcher):              ready {med[True][0]:.1f} s, {med[True][1]:.1f} cpu-s")
    print(f"ratio fork/spawn: ready {med[True][0] / med[False][0]:.2f}x, cpu {med[True][1] / med[False][1]:.2f}x; "
          f"same greedy completions: {same}; load average {psutil.getloadavg()[0]:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
