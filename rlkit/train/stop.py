"""A stop that saves: how the local trainer answers SIGINT / SIGTERM.

Before the steps begin (Ray, vLLM and the policy still starting, nothing to save) a signal
interrupts at once. Once they run (`arm()`), the first signal asks for a stop. The step in
flight is then either finished or abandoned:
  * during a rollout or a validation (`check()` in the wait loop raises `StopRequested`): the
    step is abandoned (its trials are set aside on resume) and the last finished step is saved;
  * during the update: the update finishes, the weight sync and validation are skipped, the step
    is logged and saved.
Either way a checkpoint of the last finished step is written (unless one exists or
TRAINER_SAVE_FREQ <= 0 says never) before the run tears down, and `RunStopped` says what
was saved.

A kill -9 gives no chance to save, so with checkpoints on every finished step is a resume
point: its checkpoint is written, and the previous one is removed unless TRAINER_SAVE_FREQ
made it due (`drop_resume_point`). A kill -9 then loses at most the step in flight. The stop is bounded: after STOP_DEADLINE_S, or at a second signal, the run is
interrupted where it is (KeyboardInterrupt) and saves nothing more.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Self

from rlkit.errors import RlkitError

STOP_DEADLINE_S = 300.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
    """Raised inside the training loop where the step in flight is abandoned."""


class RunStopped(RlkitError):
    """The run stopped on a signal after saving what it could; `message` says what (the CLI prints it)."""

    def __init__(self, message: str, *, saved_step: int | None, signum: int) -> None:
        super().__init__(message, saved_step=saved_step, signum=signum)
        self.saved_step = saved_step
        self.signum = signum


class GracefulStop:
    """Signal handlers for the run's lifetime (main thread only; elsewhere it never triggers)."""

    def __init__(self, deadline_s: float = STOP_DEADLINE_S, note: Any = None) -> None:
        self.signum: int | None = None
        self.armed = False  # steps are running: a signal stops gracefully instead of interrupting
        self.deadline_s = deadline_s
        self._note = note or (lambda text: None)
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        if self.requested:
            raise StopRequested(signal.Signals(self.signum).name)

    def raise_if_stopped(self, exp: str, done_step: int, saved_step: int, save_freq: int) -> None:
        """After a stop: RunStopped saying which step the run reached and what the same command resumes from."""
        if self.signum is None:
            return
        why = "TRAINER_SAVE_FREQ <= 0 turns checkpoints off" if save_freq <= 0 else "the save did not finish"
        raise RunStopped(stopped_message(exp, self.signum, done_step, saved_step, why),
                         saved_step=saved_step or None, signum=self.signum)

    def arm(self) -> None:
        """The steps begin: from now on a first signal stops after the step in flight and saves."""
        self.armed = True

    def _handle(self, signum: int, frame: object) -> None:
        if not self.armed:
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} before the first step began")
        if self.signum is not None:
            raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name}): stopping without saving more")
        self.signum = signum
        signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, self.deadline_s)
        self._note(f"{signal.Signals(signum).name}: stopping after the step in flight and saving the last finished "
                   f"step (at most {self.deadline_s:.0f} s; a second signal stops at once)")

    def _expired(self, signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"the stop took longer than {self.deadline_s:.0f} s")

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def reinstall(self) -> None:
        """Take the signals back from whoever replaced the handlers (`ray.init` sets its own SIGTERM one)."""
        if self._previous:
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def __exit__(self, *exc: object) -> None:
        if self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous = {}


def drop_resume_point(checkpoints: Path, step: int | None) -> None:
    """Remove global_step_<step>, a checkpoint kept only as the resume point now that a later one exists."""
    import shutil

    if step is not None and step > 0:
        shutil.rmtree(checkpoints / f"global_step_{step}", ignore_errors=True)


def held_signals() -> dict[int, Any]:
    """Ignore SIGINT / SIGTERM (a teardown must not be cut short); returns the handlers to put back."""
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}


def stopped_message(exp: str, signum: int, done_step: int, saved_step: int, why_not: str = "") -> str:
    """What a stop left: the last finished step, the checkpoint written, what the same command resumes from."""
    name = signal.Signals(signum).name
    if done_step == 0:
        return f"stopped ({name}) before step 1 finished: nothing to save; the same command starts {exp} from step 0"
    head = f"stopped ({name}) after step {done_step}: "
    if saved_step == done_step:
        return head + f"checkpoint global_step_{done_step} saved; the same command resumes {exp} from step {done_step}"
    if saved_step > 0:
        return head + (f"no checkpoint of it ({why_not}); the same command resumes {exp} from global_step_"
                       f"{saved_step} and redoes steps {saved_step + 1}-{done_step}")
    return head + f"no checkpoint ({why_not}); the same command starts {exp} from step 0"


def interrupted_message(checkpoints: Path) -> str:
    """After a hard interrupt (second signal, deadline): what the same command resumes from."""
    from rlkit.train.resume import latest_step

    step = latest_step(checkpoints)
    where = f"resumes from checkpoint global_step_{step}" if step else "starts from step 0 (there is no checkpoint)"
    return f"interrupted: sandboxes, Ray and vLLM were stopped; the same command {where}"
