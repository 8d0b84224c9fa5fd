"""TRAINER=verl: a batch whose every trial was masked no longer stops the run.

verl 0.9.1's real `ReplayBuffer.sample` and rlkit's subclass run here over a stand-in for TransferQueue
(`FakeTQ`: the key/tag store `tq.kv_list`/`tq.kv_clear` read and write, in one dict) and a stand-in for the
trainer's `_add_prompts_to_generate` (`refill`: puts the next prompts in the store as the agent-loop workers
would once their trials finished). A masked trial is no trajectory (`verl_samples.py`), so a fully masked
batch is prompt groups marked finished with no trajectory key: what the agent loop leaves in TransferQueue.
"""

from __future__ import annotations

import itertools

import pytest
import verl.trainer.ppo.v1.replay_buffer as verl_replay_buffer
from omegaconf import OmegaConf

from rlkit.train.verl_sampler import (
    MAX_SKIPPED_IN_A_ROW,
    SKIPPED_BATCHES,
    VERL_NO_TRAJECTORIES,
    MaskedBatchSkipped,
    MaskedBatchSkippingReplayBuffer,
)


class FakeTQ:
    """TransferQueue's key/tag metadata, in one dict per partition."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, dict]] = {"train": {}}
        self.uids = (f"u{i}" for i in itertools.count())

    def kv_list(self) -> dict[str, dict[str, dict]]:
        return {p: {k: dict(t) for k, t in items.items()} for p, items in self.store.items()}

    def kv_clear(self, keys, partition_id) -> None:
        for key in keys:
            self.store[partition_id].pop(key, None)

    def finished_groups(self, count: int, *, masked: bool, n: int = 2) -> list[str]:
        uids = [next(self.uids) for _ in range(count)]
        for uid in uids:
            self.store["train"][uid] = {"is_prompt": True, "status": "finished", "global_steps": 1}
            if not masked:
                for session in range(n):
                    self.store["train"][f"{uid}_{session}_0"] = {"status": "success", "global_steps": 1}
        return uids


def _buffer(cls, fake: FakeTQ, *, masked_refills: int = 0):
    refills: list[int] = []

    def refill(count: int) -> int:  # the trainer's _add_prompts_to_generate, its trials already finished
        refills.append(count)
        fake.finished_groups(count, masked=len(refills) <= masked_refills)
        return count

    buffer = cls(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                 max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=refill,
                 poll_interval=0.01)
    return buffer, refills


@pytest.fixture
def fake_tq(monkeypatch: pytest.MonkeyPatch) -> FakeTQ:
    fake = FakeTQ()
    monkeypatch.setattr(verl_replay_buffer, "tq", fake)
    return fake


def test_verls_own_buffer_stops_the_run_on_a_fully_masked_batch(fake_tq: FakeTQ) -> None:
    """What the subclass answers: verl's message (pinned, the subclass matches it) on this verl."""
    fake_tq.finished_groups(2, masked=True)
    buffer, _ = _buffer(verl_replay_buffer.ReplayBuffer, fake_tq)
    with pytest.raises(RuntimeError, match=VERL_NO_TRAJECTORIES):
        buffer.sample(global_steps=1, partition_id="train", batch_size=2)


def test_a_fully_masked_batch_is_skipped_and_the_step_trains_on_the_next_batch(fake_tq: FakeTQ) -> None:
    masked = fake_tq.finished_groups(2, masked=True)
    buffer, refills = _buffer(MaskedBatchSkippingReplayBuffer, fake_tq)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert refills == [2] and metrics[SKIPPED_BATCHES] == 1.0
    assert batch.keys and not {key.split("_")[0] for key in batch.keys} & set(masked)
    assert not set(masked) & set(fake_tq.store["train"])  # the masked groups are gone from TransferQueue


def test_a_batch_that_trains_reports_no_skip(fake_tq: FakeTQ) -> None:
    fake_tq.finished_groups(2, masked=False)
    buffer, refills = _buffer(MaskedBatchSkippingReplayBuffer, fake_tq)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert refills == [] and metrics[SKIPPED_BATCHES] == 0.0 and len(batch.keys) == 4


def test_broken_sandboxes_stop_the_run_with_the_reason_after_a_few_masked_batches(fake_tq: FakeTQ) -> None:
    fake_tq.finished_groups(2, masked=True)
    buffer, refills = _buffer(MaskedBatchSkippingReplayBuffer, fake_tq, masked_refills=100)
    with pytest.raises(MaskedBatchSkipped, match="fix the sandboxes, then run the same command to resume"):
        buffer.sample(global_steps=3, partition_id="train", batch_size=2)
    assert len(refills) == MAX_SKIPPED_IN_A_ROW


def test_the_sync_plan_loads_the_skipping_buffer_through_verls_hook(ws) -> None:
    from verl.utils.import_utils import load_extern_type

    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan

    def overrides(**keys) -> dict[str, str]:
        plan = build_plan(resolve(ws.config(**keys), ws.environ()))
        return dict(o.split("=", 1) for o in plan.overrides)

    sync = overrides(ALGORITHM="grpo")
    path, name = (sync[f"trainer.v1.sampler.custom_sampler.{k}"].strip("'") for k in ("path", "name"))
    assert load_extern_type(path, name) is MaskedBatchSkippingReplayBuffer
    assert "trainer.v1.sampler.custom_sampler.path" not in overrides(ALGORITHM="grpo",
                                                                     VERL_TRAINER_MODE="colocate_async")
