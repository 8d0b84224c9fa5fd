"""A step with no trainable trial skips its update (TRAINER=local); the run goes on.

When every trial of a step was masked (sandboxes or verifiers failed: infrastructure's fault), there is
nothing to train on. The step keeps its number: no update and no weight sync, but its metrics line,
its checkpoint (when due) and its validation as any step, so a resume starts after it. Each skip is
logged, counted in the step line (`training/skipped` this step, `training/skipped_steps` the run so
far, carried through checkpoints) and marked in `step_<N>/summary.json` (`update_skipped`).
The verl path skips a masked batch in its replay buffer instead (`rlkit/train/verl_sampler.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.rollout.step_file import mark_update_skipped

if TYPE_CHECKING:
    from rlkit.rollout.records import StepResult, TrialRecord

SKIPPED = "training/skipped"
SKIPPED_STEPS = "training/skipped_steps"
STATE_KEY = "skipped_steps"  # in the checkpoint's extra state


class SkippedSteps:
    """The run's count of skipped updates; restored from a checkpoint's extra state on resume."""

    def __init__(self, extra: dict[str, Any] | None = None) -> None:
        self.count = int((extra or {}).get(STATE_KEY, 0))

    def state(self) -> dict[str, int]:
        return {STATE_KEY: self.count}

    def trainable(self, result: StepResult, step_dir: Path | None) -> tuple[list[TrialRecord], dict[str, float], str]:
        """The step's trainable trials, its skip metrics and a line for the log ("" when it trains)."""
        trainable = [r for r in result.records if r.trainable]
        if trainable:
            return trainable, {SKIPPED_STEPS: float(self.count)}, ""
        self.count += 1
        if step_dir is not None:
            mark_update_skipped(step_dir, result.summary)
        outcomes = {k: v for k, v in result.summary.outcomes.items() if v}
        note = (f"step {result.step}: every trial was masked ({outcomes}): no update this step, the run goes on "
                f"({self.count} step(s) skipped so far)")
        return [], {SKIPPED: 1.0, SKIPPED_STEPS: float(self.count)}, note
