"""Where a run continues (RESUME_MODE=auto): verl's latest checkpoint, and the trial folders of steps
after it set aside. Both trainers use them: the local one in-process, verl's launcher before it starts."""

from __future__ import annotations

import time
from pathlib import Path


def latest_step(checkpoints: Path) -> int:
    """verl's `latest_checkpointed_iteration.txt` (0 when there is none)."""
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    from rlkit.config.files import FileReadError, read_int

    try:
        return read_int(marker)
    except FileReadError:
        return 0


def set_aside_steps_after(trials: Path, step: int) -> list[Path]:
    """Trial folders of steps after the checkpoint a run resumes from (an interrupted run's) are renamed
    `step_<N>.interrupted-<time>`, so step_<N>/ holds only the trials that step trained on."""
    moved = []
    if not trials.is_dir():
        return moved
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for path in trials.iterdir():
        name = path.name
        if path.is_dir() and name.startswith("step_") and name[5:].isdigit() and int(name[5:]) > step:
            target = path.with_name(f"{name}.interrupted-{stamp}")
            path.rename(target)
            moved.append(target)
    return moved


def set_aside_stale_steps(trials: Path, start: int) -> list[Path]:
    """What a run starting after `start` must not read as its own: the steps after it; and on a fresh
    start (0) every step, step_0's validation included (RESUME_MODE=disable, or an earlier run under this
    name that left no checkpoint: its results would pass for this policy's "before")."""
    return set_aside_steps_after(trials, start if start > 0 else -1)
