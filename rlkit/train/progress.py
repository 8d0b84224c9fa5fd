"""Live terminal progress of a local run (rich): the step, trials done and passing, and the phase.

Metric lines and notes print above the live bar. When the output is not a terminal the bar
stays silent and each phase change prints one plain line instead.
"""

from __future__ import annotations

from typing import Any, Self


class StepProgress:
    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from rlkit.config.display import styled_output

        # rich draws with escape sequences: the styled stream keeps its own, escapes any other
        self.console = console or Console(file=styled_output())
        self._progress = Progress(TextColumn("[bold]{task.fields[step]}[/]"), TextColumn("{task.fields[phase]}"),
                                  BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[counts]}"),
                                  TimeElapsedColumn(), console=self.console, transient=False)
        self._task = self._progress.add_task("trials", total=1, step="", phase="starting", counts="")
        self._steps = (0, 0)

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start_run(self, done: int, last: int) -> None:
        self._steps = (done, last)
        self._progress.update(self._task, step=f"step {done}/{last}")

    def phase(self, text: str) -> None:
        self._progress.update(self._task, phase=text)
        if not self.console.is_terminal:  # no live bar in a log file: one plain line per phase
            self.note(f"[{self._steps[0]}/{self._steps[1]}] {text}")

    def trials(self, counts: dict[str, int], kind: str = "trials") -> None:
        """Trials done of the phase's total; `kind` says whose (train trials, val attempts)."""
        self._progress.update(self._task, total=max(int(counts.get("total", 0)), 1),
                              completed=int(counts.get("done", 0)), counts=trial_counts(counts, kind))

    def validated(self, step: int, metrics: dict[str, Any], counts: dict[str, int]) -> None:
        """One line for a finished validation: what it measured, not how many attempts finished."""
        pass1, stderr = metrics.get("val/pass@1"), metrics.get("val/pass@1_stderr")
        shown = f"{pass1:.3f}" if isinstance(pass1, float) else "n/a"
        shown += f" ± {stderr:.3f} (1 s.e.)" if isinstance(stderr, float) else ""
        self.note(f"step {step}: validation pass@1 {shown} ({trial_counts(counts, 'val attempts')})")

    def step_done(self, step: int, metrics: dict[str, Any], counts: dict[str, int] | None = None) -> None:
        self._steps = (step, self._steps[1])
        reward = metrics.get("critic/rewards/mean")
        fields: dict[str, Any] = {"step": f"step {step}/{self._steps[1]}",
                                  "phase": f"done (reward {reward:.3f})" if isinstance(reward, float) else "done"}
        if counts is not None:  # the bar ends on the step's own trials, not the last validation's
            fields.update(total=max(int(counts.get("total", 0)), 1), completed=int(counts.get("done", 0)),
                          counts=trial_counts(counts, "train trials"))
        self._progress.update(self._task, **fields)

    def note(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)


def trial_counts(counts: dict[str, int], kind: str) -> str:
    """`passed 3 of 16 train trials, masked 1`: the passed share names its denominator."""
    done = int(counts.get("done", 0))
    text = f"passed {int(counts.get('passed', 0))} of {done} {kind}"
    masked = int(counts.get("masked", 0))
    return f"{text}, masked {masked}" if masked else text
