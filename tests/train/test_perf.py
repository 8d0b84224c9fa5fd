"""Throughput and MFU of a local step: verl's FLOP/s formula over a peak measured once per machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkit.train import perf


def _record(prompt: int, response: int, masked: bool = False) -> SimpleNamespace:
    segment = SimpleNamespace(prompt_ids=[1] * prompt, response_ids=[2] * response, response_mask=[1] * response)
    return SimpleNamespace(segments=[segment], masked=masked, trainable=not masked)


def test_the_peak_is_measured_once_per_machine_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = perf.peak_tflops(tmp_path)  # a real matmul in a subprocess
    assert first is not None and 1e-4 < first < 1e3
    cached = json.loads((tmp_path / perf.PEAK_FILE).read_text())
    assert cached[perf.machine_key()]["tflops"] == first

    def no_second_measurement(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(subprocess, "run", no_second_measurement)
    assert perf.peak_tflops(tmp_path) == first


def test_step_perf_logs_tokens_per_second_and_mfu(tmp_path: Path, tiny_model_dir: Path) -> None:
    (tmp_path / perf.PEAK_FILE).write_text(json.dumps({perf.machine_key(): {"tflops": 0.1}}))
    step = perf.StepPerf(tiny_model_dir, tmp_path)
    records = [_record(100, 50), _record(100, 30), _record(80, 20, masked=True)]
    out = step.metrics(records, {"timing_s/gen": 2.0, "timing_s/update_actor": 4.0, "timing_s/step": 8.0,
                                 "perf/update_tokens": 280.0})
    assert out["perf/rollout_tokens_per_s"] == 40.0  # 80 generated tokens of unmasked trials in 2 s
    assert out["perf/update_tokens_per_s"] == 70.0 and out["perf/throughput"] == 35.0
    from verl.utils.flops_counter import ESTIMATE_FUNC

    config = SimpleNamespace(**json.loads((tiny_model_dir / "config.json").read_text()))
    expected = ESTIMATE_FUNC["qwen3"](config, 280, [150, 130], 4.0) / 0.1
    assert out["perf/mfu/actor"] == pytest.approx(expected) and 0 < out["perf/mfu/actor"] < 1


def test_a_peak_measured_on_a_busy_machine_is_raised_to_what_an_update_reached(tmp_path: Path,
                                                                              tiny_model_dir: Path) -> None:
    (tmp_path / perf.PEAK_FILE).write_text(json.dumps({perf.machine_key(): {"tflops": 1e-9}}))  # measured while busy
    out = perf.StepPerf(tiny_model_dir, tmp_path).metrics([_record(100, 50)], {
        "timing_s/update_actor": 1.0, "perf/update_tokens": 150.0})
    assert out["perf/mfu/actor"] == 1.0
    assert perf.peak_tflops(tmp_path) == out["perf/peak_tflops"] > 1e-9  # cached for the next run


def test_a_perf_failure_never_stops_the_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    step = perf.StepPerf(tmp_path, tmp_path)
    broken = [SimpleNamespace(segments=None, masked=False)]  # no segments to count: a TypeError inside
    assert step.metrics(broken, {"timing_s/gen": 1.0}) == {}
    assert step.metrics([_record(1, 1)], {"timing_s/gen": 1.0}) == {}  # left out from then on
    assert [r.message for r in caplog.records if "perf metrics left out" in r.message]


def test_a_run_process_computes_mfu_without_importing_verl_transformers_or_torch(tmp_path: Path,
                                                                                 tiny_model_dir: Path) -> None:
    """The local trainer hands verl's formula to its policy actor (`PolicyWorker.estimated_tflops`): the run's
    own process gets the same MFU from it and never imports verl's flops_counter (verl, transformers, torch)."""
    import sys

    (tmp_path / perf.PEAK_FILE).write_text(json.dumps({perf.machine_key(): {"tflops": 0.1}}))
    code = (
        "import json, sys\n"
        "from types import SimpleNamespace as N\n"
        "from rlkit.train.perf import StepPerf\n"
        f"step = StepPerf({str(tiny_model_dir)!r}, __import__('pathlib').Path({str(tmp_path)!r}),\n"
        "                estimate=lambda tokens, seqlens, s: 0.025)\n"
        "seg = N(prompt_ids=[1] * 100, response_ids=[2] * 50, response_mask=[1] * 50)\n"
        "out = step.metrics([N(segments=[seg], masked=False, trainable=True)],\n"
        "                   {'timing_s/update_actor': 1.0, 'perf/update_tokens': 150.0})\n"
        "print(json.dumps([out['perf/mfu/actor'], [m for m in ('verl', 'transformers', 'torch') if m in sys.modules]]))\n")
    mfu, heavy = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                           timeout=120).stdout)
    assert mfu == pytest.approx(0.25) and heavy == []
    estimate = perf.flops_estimator(tiny_model_dir)  # what the actor runs
    config = SimpleNamespace(**json.loads((tiny_model_dir / "config.json").read_text()))
    from verl.utils.flops_counter import ESTIMATE_FUNC

    assert estimate is not None and estimate(150, [150], 1.0) == ESTIMATE_FUNC["qwen3"](config, 150, [150], 1.0)
    assert perf.flops_estimator(tmp_path) is None  # no config.json: MFU left out, the run goes on
