"""TRAINER=verl on the CPU: each weight sync is judged as the local trainer judges it, its verdict reaches verl's
step line, and a sync the probe rejects even after vLLM's restart stops the run.

`StubInference` stands in for `rlkit.launch.inference.Inference` (vLLM and its reload, proven in
tests/launch): it returns the `WeightSyncReport` a real sync would. `StubTrainer` stands in for verl's
trainer object; its `_consume_sync_metrics` is verl's own (`PPOTrainer._consume_sync_metrics`), which
`fit` calls right after `on_step_end` to merge the sync's metrics into the step's line. The end-to-end
proof on real vLLM and verl is tests/train/test_verl_cpu_e2e.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from rlkit.launch.weight_sync import LogprobProbe, WeightSyncReport, judge_probe
from rlkit.train import verl_sampler
from rlkit.train.verl_cpu_rollout import HttpVllmServer, WeightSyncFailed


class StubInference:
    def __init__(self, report: WeightSyncReport) -> None:
        self.report = report
        self.probes: list[LogprobProbe | None] = []

    def sync_weights(self, path: Path, *, probe: LogprobProbe | None = None) -> WeightSyncReport:
        self.probes.append(probe)
        return self.report


def _report(method: str, probe: LogprobProbe, server: list[float]) -> WeightSyncReport:
    verdict = judge_probe(server, probe, None)
    return WeightSyncReport(method=method, weights_path="/w", seconds=1.0, reload_error="stale" if method ==
                            "restart" else None, max_abs_diff=verdict.max_abs_diff, mean_abs_diff=verdict.mean_abs_diff,
                            probe_moved=verdict.moved, decisive=verdict.decisive, verified=verdict.verified,
                            unverified_reason=verdict.reason)


def _server(report: WeightSyncReport) -> HttpVllmServer:
    server = HttpVllmServer(config=None, model_path="/m", replica_rank=0)
    server.inference = StubInference(report)
    return server


PROBE = ([1, 2, 3], [4, 5], [-1.0, -2.0], [-1.5, -2.5])  # prompt, target, trainer after, trainer before


def test_a_verified_sync_is_decisive_and_reported_once() -> None:
    probe = LogprobProbe(*PROBE)
    server = _server(_report("reload", probe, [-1.0, -2.0001]))
    metrics = asyncio.run(server.reload_weights("/w", PROBE, 1))
    assert server.inference.probes[0].before_logprobs == [-1.5, -2.5]  # the "before" reaches the judge
    assert metrics["weight_sync/verified"] == 1.0 and metrics["weight_sync/decisive"] == 1.0
    assert metrics["weight_sync/probe_moved"] == pytest.approx(0.5)
    assert asyncio.run(server.last_sync_metrics()) == metrics and asyncio.run(server.last_sync_metrics()) == {}


def test_a_sync_the_probe_rejects_after_the_restart_stops_the_run() -> None:
    probe = LogprobProbe(*PROBE)
    server = _server(_report("restart", probe, [-1.5, -2.5]))  # still the old weights' numbers
    with pytest.raises(WeightSyncFailed, match="weight sync of step 3 failed: .* vLLM restarted on /w, and the "
                                               "probe still rejects it: the server is 0.5 nats"):
        asyncio.run(server.reload_weights("/w", PROBE, 3))


def test_an_undecisive_sync_is_reported_as_such() -> None:
    flat = ([1, 2, 3], [4, 5], [-1.0, -2.0], [-1.0, -2.0])  # an update that moved nothing (all-equal rewards)
    server = _server(_report("reload", LogprobProbe(*flat), [-1.0, -2.0]))
    metrics = asyncio.run(server.reload_weights("/w", flat, 2))
    assert metrics["weight_sync/decisive"] == 0.0 and metrics["weight_sync/verified"] == 1.0


class StubTrainer:
    def __init__(self) -> None:
        self.synced = 0

    def on_step_end(self) -> None:  # verl's sync trainer: checkpoint_manager.update_weights(...)
        self.synced += 1

    _consume_sync_metrics = PPOTrainer._consume_sync_metrics


def test_the_sync_verdict_joins_the_steps_metrics_through_verls_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = StubTrainer()
    verdict = {"weight_sync/decisive": 1.0, "weight_sync/verified": 1.0, "weight_sync/probe_moved": 0.2}
    monkeypatch.setattr(verl_sampler, "sync_metrics", lambda _trainer: dict(verdict))
    verl_sampler.report_weight_sync(trainer)
    trainer.on_step_end()
    assert trainer.synced == 1 and trainer._consume_sync_metrics() == verdict
    assert trainer._consume_sync_metrics() == {}  # one step's verdict, once
