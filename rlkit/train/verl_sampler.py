"""verl's sync replay buffer, less the stop on a batch whose every trial was masked (TRAINER=verl).

A masked trial is no sample (`verl_samples.py`), so a step whose every trial was masked leaves its
groups finished with no trajectory, and verl 0.9.1's `ReplayBuffer.sample` stops the run ("Sync replay
buffer selected terminal groups with no materializable trajectories"): a cluster run would lose the
rest of its allocation to one bad batch of sandboxes. This subclass (verl's own hook,
`trainer.v1.sampler.custom_sampler`, set by the launch plan for `VERL_TRAINER_MODE=sync`) clears those
groups, logs it, and asks the trainer for the next batch of prompts (verl's `refill_fn`, the one its
DAPO filter uses); the step trains on that batch, under the same step number, and reports
`training/skipped_batches`. The local trainer skips the step itself (`rlkit/train/skip.py`): verl's
step always trains on a batch. After `MAX_SKIPPED_IN_A_ROW` masked batches in one step the sandboxes
are broken, not unlucky: the run stops with that reason, and the same command resumes it.
Checkpoints are verl's (its dataloader state included), so a resume is unaffected.

It is also the one rlkit object in verl's trainer process, so it hands the trainer the verdict of the
CPU rollout's weight sync (`verl_cpu_rollout.py`): after verl's `on_step_end` synced the weights, the
replica servers' `weight_sync/*` metrics go into `_pending_sync_metrics`, verl's own channel for
"weight-sync stats stashed by on_step_end", which `fit` merges into that step's line.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

log = logging.getLogger(__name__)

VERL_NO_TRAJECTORIES = "no materializable trajectories"  # verl 0.9.1's message (a test pins it)
SKIPPED_BATCHES = "training/skipped_batches"
MAX_SKIPPED_IN_A_ROW = 3


class MaskedBatchSkipped(RuntimeError):
    """Every trial of several batches in a row was masked: the sandboxes are broken."""


class MaskedBatchSkippingReplayBuffer(ReplayBuffer):
    """`ReplayBuffer` whose `sample` replaces a batch with no trajectory by the next batch of prompts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        trainer = getattr(self.refill_fn, "__self__", None)  # verl passes its trainer's bound method
        if trainer is not None and uses_http_rollout(trainer):
            report_weight_sync(trainer)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        skipped = 0
        while True:
            try:
                batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id,
                                                batch_size=batch_size)
            except RuntimeError as exc:
                if partition_id == "val" or VERL_NO_TRAJECTORIES not in str(exc) or self.refill_fn is None:
                    raise
                skipped += 1
                if skipped > MAX_SKIPPED_IN_A_ROW:
                    raise MaskedBatchSkipped(
                        f"step {global_steps}: every trial of {skipped} batches in a row was masked (sandbox or "
                        "verifier failures, see harbor_trials/.../step_*/summary.json): fix the sandboxes, then "
                        "run the same command to resume from the last checkpoint") from exc
                empty = self._groups_without_trajectories(partition_id)
                log.warning("step %d: every trial of the batch was masked (%d group(s) with no trajectory): "
                            "no update on it; the step trains on the next %d prompt(s) (%d batch(es) skipped "
                            "this step)", global_steps, len(empty), batch_size, skipped)
                self._clear_groups(partition_id, empty)
                self.refill_fn(batch_size)
                continue
            if partition_id != "val":
                metrics[SKIPPED_BATCHES] = float(skipped)
            return batch, metrics

    def _groups_without_trajectories(self, partition_id: str) -> set[str]:
        """Finished (or failed) prompt groups of the last snapshot with no stored trajectory."""
        terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
        with_trajectories = {key.split("_")[0] for key in self.partitions[partition_id]}
        return terminal - with_trajectories



def uses_http_rollout(trainer: Any) -> bool:
    from rlkit.launch.verl_overrides import CPU_ROLLOUT

    return str(trainer.config.actor_rollout_ref.rollout.get("name", "")) == CPU_ROLLOUT


def report_weight_sync(trainer: Any) -> None:
    """After each of the trainer's `on_step_end` (its weight sync), the servers' verdicts join the step's metrics."""
    synced = trainer.on_step_end

    def on_step_end() -> None:
        synced()
        pending = dict(getattr(trainer, "_pending_sync_metrics", None) or {})
        pending.update(sync_metrics(trainer))
        trainer._pending_sync_metrics = pending

    trainer.on_step_end = on_step_end


def sync_metrics(trainer: Any) -> dict[str, float]:
    """The `weight_sync/*` metrics of the last sync of every vllm_http replica (the worst of each, over
    replicas: one stale replica makes the step's sync unverified)."""
    import ray

    from rlkit.train.verl_cpu_rollout import server_name

    out: dict[str, float] = {}
    replicas = getattr(getattr(trainer, "checkpoint_manager", None), "replicas", None) or []
    for rank in [getattr(r, "replica_rank", i) for i, r in enumerate(replicas)] or [0]:
        try:
            server = ray.get_actor(server_name(rank))
        except ValueError:
            continue
        for key, value in ray.get(server.last_sync_metrics.remote()).items():
            worse = min if key in ("weight_sync/verified", "weight_sync/decisive") else max
            out[key] = worse(out[key], value) if key in out else value
    return out
