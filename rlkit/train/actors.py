"""The local trainer's Ray actors: the policy (torch on the CPU) and the rollout (the engine's trials).

The driver (`rlkit.train.local`) orchestrates them with `ray.get`, the way verl's driver
orchestrates its worker groups on a cluster: rollouts and updates run in their own
processes, and only records, metrics and file paths cross between them.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlkit.rollout.records import StepResult, TrialRecord
    from rlkit.tasks.index import IndexRow

PROBE_PROMPT = 48  # tokens of a trial's prompt the weight-sync probe conditions on
PROBE_TARGET = 128  # response tokens whose logprobs it compares (more tokens: a small update shows)
PROBE_SEED = 20251201  # the fixed probe of a resume, when no trial has been sampled yet


class PolicyWorker:
    """Holds the HF policy and its optimizer; one `update` per step. Runs as a Ray actor."""

    def __init__(self, model_dir: str, cfg: dict[str, Any], threads: int | None = None) -> None:
        import torch

        from rlkit.train.algo import AlgoConfig
        from rlkit.train.policy import OptimConfig, PolicyUpdater

        torch.set_num_threads(threads or os.cpu_count() or 1)  # Ray sets OMP threads to the actor's num_cpus
        torch.manual_seed(int(cfg.get("seed", 0)))
        self.cfg = cfg
        self.updater = PolicyUpdater(model_dir, AlgoConfig(**cfg["algo"]), OptimConfig(**cfg["optim"]), device="cpu")
        # probe tokens and the trainer's logprobs of them before the weights last changed
        self._probe: tuple[list[int], list[int], list[float]] | None = None
        # padding never reaches the loss (masks); the model's own pad id keeps the tensors readable
        self.pad_id = int(getattr(self.updater.model.config, "pad_token_id", None) or 0)

    def pid(self) -> int:
        return os.getpid()

    @functools.cached_property
    def _flops(self) -> Any:
        from rlkit.train.perf import flops_estimator

        return flops_estimator(self.updater.model_dir) if self.updater.model_dir is not None else None

    def estimated_tflops(self, tokens: int, seqlens: list[int], seconds: float) -> float | None:
        """verl's FLOP/s formula for this policy (`rlkit.train.perf`), here where verl is loaded already."""
        return None if self._flops is None else self._flops(tokens, seqlens, seconds)

    def update(self, records: Sequence[TrialRecord]) -> dict[str, float]:
        """Build the batch from the step's trainable trials, compute advantages and losses, step the optimizer."""
        from rlkit.train.batch import build_batch

        trainable = [r for r in records if r.trainable]
        batch = build_batch(trainable, max_prompt=self.cfg["max_prompt"], max_response=self.cfg["max_response"],
                            pad_id=self.pad_id)
        self._remember_probe(probe_tokens(trainable) or fixed_probe_tokens(self._vocab()))
        return dict(self.updater.update(batch, mini_batches=self.cfg["mini_batches"]))

    def _vocab(self) -> int:
        return int(self.updater.model.config.vocab_size)

    def _remember_probe(self, tokens: tuple[list[int], list[int]]) -> None:
        """The probe's tokens and the trainer's logprobs of them now, before the weights change."""
        prompt, target = tokens
        self._probe = (prompt, target, self.updater.log_probs(prompt + target, start=len(prompt)).tolist())

    def save_hf(self, out_dir: str) -> dict[str, Any]:
        """Write the current weights as an HF directory; the probe's tokens and the trainer's logprobs of them."""
        start = time.perf_counter()
        self.updater.save_hf(Path(out_dir))
        out: dict[str, Any] = {"seconds": time.perf_counter() - start, "probe": None}
        if self._probe is not None:  # (prompt, target, trainer logprobs after, before)
            prompt, target, before = self._probe
            out["probe"] = (prompt, target, self.updater.log_probs(prompt + target, start=len(prompt)).tolist(),
                            before)
        return out

    def save_checkpoint(self, root: str, step: int, extra_state: dict[str, Any]) -> str:
        from rlkit.train.checkpoint import save_checkpoint

        return str(save_checkpoint(Path(root), step, self.updater, extra_state))

    def load_checkpoint(self, root: str) -> dict[str, Any] | None:
        """Restore weights, optimizer and RNG from the latest checkpoint under `root`; its extra state."""
        from rlkit.train.checkpoint import latest_checkpoint, load_checkpoint

        latest = latest_checkpoint(Path(root))
        if latest is None:
            return None
        step, path = latest
        # the server was started on MODEL_PATH: the sync after a resume is probed against these weights
        self._remember_probe(fixed_probe_tokens(self._vocab()))
        return {"global_step": step, **dict(load_checkpoint(path, self.updater) or {})}


def probe_tokens(records: Sequence[TrialRecord]) -> tuple[list[int], list[int]] | None:
    """A slice of a trajectory the update trained on: the server and the trainer score its response tokens."""
    for record in records:
        seg = record.training_segment()
        if seg is not None and len(seg.prompt_ids) and len(seg.response_ids) >= 2:
            return list(seg.prompt_ids[-PROBE_PROMPT:]), list(seg.response_ids[:PROBE_TARGET])
    return None


def fixed_probe_tokens(vocab_size: int) -> tuple[list[int], list[int]]:
    """Seeded token ids (no trial needed): any sequence's logprobs depend on every weight."""
    import random

    rng = random.Random(PROBE_SEED)
    ids = [rng.randrange(vocab_size) for _ in range(PROBE_PROMPT + PROBE_TARGET)]
    return ids[:PROBE_PROMPT], ids[PROBE_PROMPT:]


class RolloutWorker:
    """Runs a step's trials through the rollout engine (and validation passes). Runs as an async Ray actor,
    so `progress()` answers while a step is in flight."""

    def __init__(self, scaffold: str, backend: str) -> None:
        """Started before inference is up: the trial stack's imports run while vLLM boots, not in the
        first trial (where they stall the event loop every trial of the step runs on)."""
        from rlkit.rollout.engine import preload

        try:
            self.preload_s: float | None = preload(scaffold, backend)
        except Exception as exc:  # noqa: BLE001 -- the trials import it again and report it as their outcome
            logging.getLogger(__name__).warning("preloading the trial stack failed: %s", exc)
            self.preload_s = None
        self.engine: Any = None
        self.val_engine: Any = None
        self._progress: dict[str, Any] = {"done": 0, "passed": 0, "masked": 0, "total": 0}

    async def configure(self, engine_config: dict[str, Any],
                        val_config: dict[str, Any] | None = None) -> float | None:
        """The engines, once the proxy's address is known. Returns the preload's seconds (None: it failed)."""
        from rlkit.rollout.engine import EngineConfig, RolloutEngine

        self.engine = RolloutEngine(EngineConfig(**engine_config))
        self.val_engine = RolloutEngine(EngineConfig(**val_config)) if val_config else None
        return self.preload_s

    async def run_step(self, step: int, rows: Sequence[IndexRow]) -> StepResult:
        self._progress = {"done": 0, "passed": 0, "masked": 0, "total": len(rows) * self.engine.config.n_resp}
        return await self.engine.run_step(step, rows, on_trial=self._count)

    def _count(self, record: TrialRecord) -> None:
        self._progress["done"] += 1
        self._progress["passed"] += int(not record.masked and record.reward >= 1.0)
        self._progress["masked"] += int(record.masked)

    async def pid(self) -> int:
        return os.getpid()

    async def progress(self) -> dict[str, Any]:
        return dict(self._progress)

    async def validate(self, step: int, rows: Sequence[IndexRow], k: int, results_path: str) -> dict[str, Any]:
        """k attempts per val row: `rlkit eval`'s pass@k report (also written beside the results)."""
        from rlkit.rollout.passes import pass_at_k_report, run_pass, write_json

        if self.val_engine is None:
            raise RuntimeError("no validation engine configured")
        self._progress = {"done": 0, "passed": 0, "masked": 0, "total": len(rows) * k}

        def seen(result: Any, _tallies: Any) -> None:
            self._progress["done"] += 1
            self._progress["passed"] += int(result.passed)
            self._progress["masked"] += int(not result.graded)

        tallies = await run_pass(self.val_engine, rows, k, Path(results_path), step=step, on_result=seen)
        report = pass_at_k_report(tallies, k)
        write_json(Path(results_path).with_name("eval.json"), report)
        return report
