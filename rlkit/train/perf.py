"""Throughput and MFU of a local run's steps, so the dashboard's throughput panel has curves.

    perf/rollout_tokens_per_s   tokens the policy generated in the rollout / timing_s/gen
    perf/update_tokens_per_s    tokens in the update's batch / timing_s/update_actor
    perf/total_num_tokens, perf/throughput    verl's names: the batch's tokens, and them / timing_s/step
    perf/mfu/actor              verl's FlopsCounter estimate of the update's FLOP/s over this machine's peak

The FLOP/s estimate is verl's per-model formula (`verl.utils.flops_counter.ESTIMATE_FUNC`, what
its FlopsCounter calls). verl divides it by a table of GPU peaks, looked up through the CUDA
device; the local trainer divides by a peak measured on this machine instead: a dense fp32
matmul with as many threads as the policy actor uses, run once in a subprocess and cached in
RLKIT_CACHE_DIR per machine (host, CPU model, cores). A measurement taken while the machine
was busy reads low; when an update reaches more than it, the peak becomes that rate (and is
cached), so MFU never reads above 1. None of this may stop a run: a failure logs once and
leaves the perf metrics out. The formula runs where verl is loaded already (the local trainer's policy
actor, `flops_estimator`), not in the run's own process: importing verl's flops_counter there (verl,
transformers, torch) cost every run ~8 s of CPU and ~400 MiB.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlkit.config.paths import machine_cache_dir

log = logging.getLogger(__name__)
PEAK_FILE = "peak_flops.json"
MATMUL_N = 1024
MEASURE_S = 1.5


def machine_key(threads: int | None = None) -> str:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        cpu = platform.processor()
    return f"{socket.gethostname()}|{cpu}|{threads or os.cpu_count()} threads"


def measure_peak_tflops(seconds: float = MEASURE_S, n: int = MATMUL_N) -> float:
    """The best fp32 matmul rate of this process's torch threads, in TFLOP/s."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)  # as many as the policy actor uses
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up: thread pool and caches
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t))
    return best / 1e12


def _peak_file(cache_dir: Path | None) -> Path:
    return (cache_dir or machine_cache_dir()) / PEAK_FILE


def _read_peaks(path: Path) -> dict[str, Any]:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def remember_peak(cache_dir: Path | None, tflops: float, how: str) -> None:
    path = _peak_file(cache_dir)
    cached = _read_peaks(path)
    cached[machine_key()] = {"tflops": tflops, "measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "how": how}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=1))
    except OSError:
        pass  # an unwritable cache costs a measurement next run, nothing else


def peak_tflops(cache_dir: Path | None, timeout_s: float = 120.0) -> float | None:
    """This machine's measured peak (cached); None when it cannot be measured."""
    entry = _read_peaks(_peak_file(cache_dir)).get(machine_key())
    if isinstance(entry, dict) and isinstance(entry.get("tflops"), int | float) and entry["tflops"] > 0:
        return float(entry["tflops"])
    try:
        out = subprocess.run([sys.executable, "-m", "rlkit.train.perf"], capture_output=True, text=True,
                             timeout=timeout_s, check=True)
        tflops = float(json.loads(out.stdout.strip().splitlines()[-1])["tflops"])
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError):
        return None
    remember_peak(cache_dir, tflops, f"fp32 matmul {MATMUL_N}")
    return tflops


FlopsEstimate = Callable[[int, list[int], float], "float | None"]  # (tokens, seqlens, seconds) -> TFLOP/s


def flops_estimator(model_path: str | Path) -> FlopsEstimate | None:
    """verl's FLOP/s formula for the model's type (None without a readable config.json or a formula
    for its type). Imports verl's flops_counter: call it where verl is loaded already."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    from verl.utils import flops_counter

    formula = flops_counter.ESTIMATE_FUNC.get(str(config.get("model_type")))
    if formula is None:
        return None
    fields = SimpleNamespace(**config)
    return lambda tokens, seqlens, seconds: formula(fields, tokens, seqlens, seconds)


class StepPerf:
    """Per-step throughput and MFU for one run. `estimate` computes verl's FLOP/s formula (in the policy
    actor for the local trainer); without it, `flops_estimator` runs in this process."""

    def __init__(self, model_path: str | Path, cache_dir: Path | None, estimate: FlopsEstimate | None = None) -> None:
        self.model_path = Path(model_path)
        self.cache_dir = cache_dir
        self._estimate = estimate
        self._peak: float | None = None
        self._ready = False
        self._broken = False

    def _setup(self) -> None:
        if self._ready:
            return
        self._ready = True
        self._peak = peak_tflops(self.cache_dir)
        if self._estimate is None:
            self._estimate = flops_estimator(self.model_path)

    def metrics(self, records: Sequence[Any], metrics: Mapping[str, float]) -> dict[str, float]:
        """From the step's records and its timings (timing_s/gen, update_actor, step; perf/update_tokens);
        empty (with one warning) when they cannot be computed."""
        if self._broken:
            return {}
        try:
            return self._metrics(records, metrics)
        except Exception as exc:  # noqa: BLE001 — a metric must never stop a run
            self._broken = True
            log.warning("perf metrics left out from now on: %s: %s", type(exc).__name__, exc)
            return {}

    def _metrics(self, records: Sequence[Any], metrics: Mapping[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        generated = sum(sum(s.response_mask) for r in records if not r.masked for s in r.segments)
        gen_s = metrics.get("timing_s/gen")
        if gen_s:
            out["perf/rollout_tokens_per_s"] = generated / gen_s
        tokens = metrics.get("perf/update_tokens")
        update_s = metrics.get("timing_s/update_actor")
        if not tokens or not update_s:
            return out
        out["perf/update_tokens_per_s"] = tokens / update_s
        out["perf/total_num_tokens"] = float(tokens)
        if metrics.get("timing_s/step"):
            out["perf/throughput"] = tokens / metrics["timing_s/step"]
        self._setup()
        if self._estimate is not None and self._peak:
            seqlens = [len(s.prompt_ids) + len(s.response_ids) for r in records if r.trainable for s in r.segments]
            scale = tokens / sum(seqlens) if sum(seqlens) else 1.0  # the batch's cuts, spread over the sequences
            seqlens = [max(1, round(n * scale)) for n in seqlens]
            achieved = self._estimate(sum(seqlens), seqlens, update_s)  # TFLOP/s
            if achieved is None:
                return out
            if achieved > self._peak:  # the measurement ran on a busy machine: this update is the best seen
                self._peak = achieved
                remember_peak(self.cache_dir, achieved, "an update's rate (above the matmul measured)")
            out["perf/mfu/actor"] = achieved / self._peak
            out["perf/peak_tflops"] = self._peak
        return out


if __name__ == "__main__":  # the peak measurement, in a process of its own: no trainer threads compete with it
    print(json.dumps({"tflops": measure_peak_tflops(), "key": machine_key()}))
