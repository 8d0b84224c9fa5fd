"""The local trainer's progress line says whose trials it counts and what a validation measured."""

from __future__ import annotations

import io

from rich.console import Console

from rlkit.train.progress import StepProgress, trial_counts


def test_a_validation_reports_its_pass_at_1_and_the_bar_ends_on_the_steps_own_trials() -> None:
    """At the end of the quickstart the bar read "3/3 ... passing" next to a held-out pass@1 of 0.0:
    the last validation's attempt counts. Now validation prints its pass@1, and the bar ends on the
    step's train trials with the denominator named."""
    out = io.StringIO()
    progress = StepProgress(Console(file=out, force_terminal=False, width=200))
    progress.start_run(7, 8)
    progress.trials({"done": 3, "total": 3, "passed": 0, "masked": 0}, "val attempts")
    progress.validated(8, {"val/pass@1": 0.0}, {"done": 3, "total": 3, "passed": 0, "masked": 0})
    progress.step_done(8, {"critic/rewards/mean": 0.625}, {"done": 16, "total": 16, "passed": 10, "masked": 1})
    assert "step 8: validation pass@1 0.000 (passed 0 of 3 val attempts)" in out.getvalue()
    task = progress._progress.tasks[0]
    assert (task.completed, task.total) == (16, 16)
    assert task.fields["counts"] == "passed 10 of 16 train trials, masked 1"
    assert trial_counts({"done": 2, "passed": 2}, "val attempts") == "passed 2 of 2 val attempts"
