"""SIGTERM and SIGHUP stop a command that runs trials as Ctrl-C does.

By default either signal ends a Python process at once, with no `finally` run, so every sandbox its
trials had started stays up (a scheduler's stop, `timeout`, a closed terminal). Raised as
KeyboardInterrupt instead, the trials are cancelled and their sandboxes removed on the way out; then,
since a trial cancelled while its container was being created never learned that container's id, every
container this process owns (its pid and start time in the owner labels) is removed too.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
log = logging.getLogger(__name__)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """For the block's lifetime (main thread only; elsewhere signals cannot be set): SIGTERM/SIGHUP raise
    KeyboardInterrupt. A handler set inside the block (the trainer's graceful stop) takes over while it is set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

    before = {sig: signal.signal(sig, interrupt) for sig in SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        remove_own_sandboxes()
        raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def remove_own_sandboxes() -> int:
    """Remove the docker sandboxes this process owns (none when a launcher owns them: its reaper does);
    how many went. A daemon that does not answer leaves them to `rlkit cleanup`."""
    from rlkit.config import owner
    from rlkit.sandbox import labels
    from rlkit.sandbox.docker_api import remove_labelled

    mine = owner.owner_env()
    if mine[owner.OWNER_PID_ENV] != str(os.getpid()):
        return 0
    try:
        return remove_labelled({labels.MANAGED: "1", labels.OWNER_PID: mine[owner.OWNER_PID_ENV],
                                labels.OWNER_START: mine[owner.OWNER_START_ENV]})
    except Exception as exc:  # noqa: BLE001 -- no daemon (or a k8s run): `rlkit cleanup` finds what is left
        log.warning("could not remove this process's sandboxes: %s (rlkit cleanup removes them)", exc)
        return 0
