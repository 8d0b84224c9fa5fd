"""The run lock: `logs/<exp>.lock` marks a run in flight (cleanup and /rl:check read it).

JSON fields:
  pid        the trainer's process id          host       socket.gethostname()
  uid, user  the real uid that started it (and its login name, from the uid)
  started    ISO-8601 UTC
  heartbeat  ISO-8601 UTC, refreshed every HEARTBEAT_S while the run lives
  project, exp, step (the last finished step), phase (rollout | update | sync | save | validate | ...)
  config     the run config's path             reaper_pid the process that cleans up if the trainer is killed
  overrides  {KEY: text} given on top of the config (keyword arguments, --set); absent when none
  children   [pid, start time] of the run's processes (Ray, its actors, vLLM, the proxy)
  leftovers  folders the run writes that outlive its processes (Ray's session, vLLM's scratch): the
             reaper, or `rlkit cleanup` when the reaper died too, removes them
  total_steps the step the run ends at
  ray        TRAINER=verl: {"gcs": HOST:PORT, "ports": {flag: port}} of the run's Ray head (a one-machine
             run's private Ray takes free ports; a cluster head RAY_PORT)

A lock whose pid is gone (same host) or whose heartbeat is older than STALE_S is stale:
the next run takes it over. A live lock makes a second run of the same EXP_NAME refuse.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any, Self

from rlkit.config.owner import me, read_lock, uid
from rlkit.errors import UserError

HEARTBEAT_S = 15.0
STALE_S = 120.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(lock: dict[str, Any]) -> bool:
    if lock.get("host") == socket.gethostname():
        return not pid_alive(int(lock.get("pid", 0) or 0))
    try:
        beat = dt.datetime.fromisoformat(str(lock.get("heartbeat")))
    except ValueError:
        return True
    return (dt.datetime.now(dt.UTC) - beat).total_seconds() > STALE_S


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".lock.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # readers never see half a file


class RunLock:
    """Take with `acquire()`; `update(step=..., phase=...)` as the run moves; `release()` at the end."""

    def __init__(self, path: Path, *, project: str, exp: str, config: str = "",
                 overrides: dict[str, str] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "uid": uid(), "user": me(),
                                     "started": _now(), "heartbeat": _now(), "project": project, "exp": exp,
                                     "step": 0, "phase": "starting", "config": config}
        if overrides:  # readers (rlkit status EXP) resolve the config with them, as the run did
            self.data["overrides"] = dict(overrides)
        self.previous: dict[str, Any] | None = None  # a stale lock this run took over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        old = read_lock(self.path)
        if old is not None and not is_stale(old) and old.get("pid") != os.getpid():
            raise UserError(f"{self.data['exp']} is already running (pid {old.get('pid')} on {old.get('host')}, "
                            f"started {old.get('started')}; lock {self.path})", key="EXP_NAME",
                            fix="wait for it, stop it (kill PID), or pick another EXP_NAME")
        self.previous = old
        from rlkit.config.owner import claim_ownership

        # what the run starts from now on (Ray, its actors, vLLM, sandboxes) names this trainer and its run
        claim_ownership(self.data["project"], self.data["exp"])
        _write(self.path, self.data)
        self._thread = threading.Thread(target=self._beat, name="rlkit-lock-heartbeat", daemon=True)
        self._thread.start()
        return self

    def update(self, **fields: Any) -> None:
        with self._guard:
            self.data.update(fields, heartbeat=_now())
            _write(self.path, self.data)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.update()
            except OSError:
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        mine = read_lock(self.path)
        if mine is not None and mine.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
