"""A collapse named on the trainer's own console while it happens, not only in `rlkit status`.

`CollapseWatch` runs beside a trainer (either one: it reads the run's files, as status does) and, each
time the metric files grow, applies the collapse rule (rlkit.monitor.collapse) to the last steps. A
finding is handed to `on_found` once; the same kind is named again only after it cleared and came
back, so a collapsing run does not repeat the warning every step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Self

from rlkit.monitor import collapse as collapse_mod
from rlkit.monitor.status import collapse_of

if TYPE_CHECKING:
    from rlkit.config.paths import RunPaths

POLL_S = 5.0  # a step takes tens of seconds on the smallest run; the check reads a bounded tail


def collapse_lines(found: collapse_mod.Collapse) -> list[str]:
    """The warning as plain lines: the headline, its numbers, what to try."""
    return [f"✗ {found.headline}", f"  {found.numbers}"] + [f"  try: {tip}" for tip in found.advice]


class CollapseWatch:
    """Polls a run's metric files on a daemon thread; `on_found(collapse)` for each newly named collapse."""

    def __init__(self, paths: RunPaths, on_found: Callable[[collapse_mod.Collapse], None], *,
                 poll_s: float = POLL_S) -> None:
        self.paths, self.on_found, self.poll_s = paths, on_found, poll_s
        self.named: list[collapse_mod.Collapse] = []
        self._active: set[tuple[str, str]] = set()
        self._seen: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlkit-collapse-watch", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 5)
        self._safe_check()  # the last steps, logged after the last poll

    def _sizes(self) -> tuple[int, ...]:
        out = []
        for path in (self.paths.jsonl, self.paths.console_log):
            try:
                out.append(path.stat().st_size)
            except OSError:
                out.append(-1)
        return tuple(out)

    def check(self) -> collapse_mod.Collapse | None:
        """One look at the files (only when they grew since the last); the finding it named, if new."""
        sizes = self._sizes()
        if sizes == self._seen:
            return None
        self._seen = sizes
        try:
            found = collapse_of(self.paths)
        except (OSError, ValueError):  # a file mid-write or rotated: the next poll reads it whole
            return None
        if found is None:
            self._active.clear()
            return None
        key = (found.kind, found.signal)
        if key in self._active:
            return None
        self._active.add(key)
        self.named.append(found)
        self.on_found(found)
        return found

    def _safe_check(self) -> bool:
        try:
            self.check()
        except Exception:  # noqa: BLE001 - a warning must never stop or fail the trainer it watches
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s) and self._safe_check():
            pass
