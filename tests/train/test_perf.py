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
