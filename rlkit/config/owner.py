"""Who owns a process, a sandbox or a run: the facts cleanup and `/rl:check` both read.

An owner is (uid, host, pid, start time). The uid is the process's real uid, never a
name from the environment ($USER / $LOGNAME can say anything); the start time tells a live
owner from a reused pid. rlkit's launchers put the owner into the environment of what they
start (`RLKIT_OWNER_PID` / `RLKIT_OWNER_START`, and the run's `RLKIT_OWNER_PROJECT` /
`RLKIT_OWNER_EXPERIMENT`), so a vLLM server, a proxy or a Ray daemon can be traced back to
the run that started it after that run is gone, and a cleanup scoped to a project finds it.

The run lock (`logs/<exp>.lock`, written by rlkit.launch.lock) is read here too, so the
floors above the trainers (ops, validate) read it without importing the trainer.
psutil is imported lazily: `rlkit check` loads this module.
"""

from __future__ import annotations

import datetime as dt
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

OWNER_PID_ENV = "RLKIT_OWNER_PID"
OWNER_START_ENV = "RLKIT_OWNER_START"
OWNER_PROJECT_ENV = "RLKIT_OWNER_PROJECT"
OWNER_EXPERIMENT_ENV = "RLKIT_OWNER_EXPERIMENT"
HEARTBEAT_S = 15.0
STALE_S = 120.0  # a lock on another host whose heartbeat is older than this belongs to a dead run
START_TOLERANCE_S = 1.0  # psutil's create time is rounded to clock ticks

# Command-line fragments of processes rlkit starts and may stop. Specific on purpose: a
# script merely named after ray or vllm must never match.
SERVER_MARKERS = {
    "vllm": ("vllm.entrypoints", "vllm serve", "VLLM::"),
    "proxy": ("rlkit proxy serve", "rlkit.cli.main proxy serve", "-m rlkit proxy serve", "litellm"),
    "dashboard": ("rlkit dashboard", "-m rlkit dashboard", "rlkit.monitor.dashboard"),
    "ray": ("/ray/core/src/ray/raylet/raylet", "/ray/core/src/ray/gcs/gcs_server", "/ray/_private/log_monitor.py",
            "/ray/autoscaler/_private/monitor.py", "/ray/dashboard/dashboard.py", "/ray/dashboard/agent.py",
            "ray.util.client.server", "/ray/_private/runtime_env/agent/main.py", "ray::", "/ray/_private/workers/"),
}
# A run itself (the trainer and `rlkit run`'s train.sh): never stopped by cleanup, only reported.
RUN_MARKERS = ("rlkit train", "-m rlkit train", "rlkit.cli.main train", "scripts/train/train.sh", "verl.trainer.main_ppo")


def uid() -> int:
    """Who owns what this process starts: its real uid (what `ps` and the kernel say, not $USER)."""
    return os.getuid()


def me() -> str:
    """The login name of this process's real uid (from the password database; the uid when it has none)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def process_uid(proc) -> int | None:
    """A psutil process's real uid (None when it vanished or cannot be read)."""
    import psutil

    try:
        return proc.uids().real
    except (psutil.Error, AttributeError):
        return None


def host() -> str:
    return socket.gethostname()


def process_start(pid: int) -> float | None:
    """The pid's create time (seconds since the epoch), None when there is no such process."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def same_process_alive(pid: int, start: float | None) -> bool:
    """`pid` lives and, when `start` is known, is the process that started then (not a reused pid)."""
    if pid <= 0:
        return False
    now = process_start(pid)
    if now is None:
        return False
    return start is None or abs(now - start) < START_TOLERANCE_S


def stop_processes(procs: list, grace_s: float) -> list[str]:
    """SIGTERM psutil processes, wait up to `grace_s`, SIGKILL the rest and wait for them again;
    the errors of kills that failed (a process that vanished is not an error)."""
    import psutil

    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(procs, timeout=grace_s)
    errors = []
    for proc in still:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
        except psutil.Error as exc:
            errors.append(f"pid {proc.pid}: {exc}")
    psutil.wait_procs(still, timeout=grace_s)
    return errors


def owner_env() -> dict[str, str]:
    """Environment a launcher gives its children: this process (or the owner it inherited) owns them."""
    scope = {k: os.environ[k] for k in (OWNER_PROJECT_ENV, OWNER_EXPERIMENT_ENV) if os.environ.get(k)}
    pid = os.environ.get(OWNER_PID_ENV)
    if pid:
        return {OWNER_PID_ENV: pid, OWNER_START_ENV: os.environ.get(OWNER_START_ENV, ""), **scope}
    start = process_start(os.getpid())
    return {OWNER_PID_ENV: str(os.getpid()), OWNER_START_ENV: f"{start:.2f}" if start else "", **scope}


def claim_ownership(project: str | None = None, experiment: str | None = None) -> None:
    """Make this process the owner of everything it starts from now on (unless an owner is inherited);
    with a project (and experiment), what it starts carries them so a scoped cleanup finds it."""
    if project:
        os.environ[OWNER_PROJECT_ENV] = project
    if experiment:
        os.environ[OWNER_EXPERIMENT_ENV] = experiment
    os.environ.update(owner_env())


def _float(text: object) -> float | None:
    try:
        return float(str(text))
    except ValueError:
        return None


@dataclass(frozen=True)
class Owner:
    user: str
    host: str
    pid: int
    start: float | None
    project: str = ""
    experiment: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str], user: str) -> Owner | None:
        pid = environ.get(OWNER_PID_ENV, "")
        if not pid.isdigit():
            return None
        return cls(user, host(), int(pid), _float(environ.get(OWNER_START_ENV)),
                   environ.get(OWNER_PROJECT_ENV, ""), environ.get(OWNER_EXPERIMENT_ENV, ""))

    def in_scope(self, project: str | None, experiment: str | None = None) -> bool:
        """Started by a run of `project` (and `experiment`, when given); anything when no project is given."""
        if not project:
            return True
        return self.project == project and (not experiment or self.experiment in (experiment, f"{experiment}_val"))

    def alive(self) -> bool | None:
        """True / False on this host; None on another host (only its run's heartbeat can tell)."""
        if self.host and self.host != host():
            return None
        return same_process_alive(self.pid, self.start)


# ---- the run lock --------------------------------------------------------------------------------
class LockFile(BaseModel):
    """The fields of logs/<exp>.lock readers use (rlkit.launch.lock writes it); others are kept as they are."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    pid: Annotated[StrictInt, Field(ge=0, le=2**32)] | None = None
    host: Annotated[StrictStr, Field(max_length=255)] | None = None
    user: Annotated[StrictStr, Field(max_length=255)] | None = None
    started: Annotated[StrictStr, Field(max_length=64)] | None = None
    heartbeat: Annotated[StrictStr, Field(max_length=64)] | None = None
    project: Annotated[StrictStr, Field(max_length=255)] | None = None
    exp: Annotated[StrictStr, Field(max_length=255)] | None = None
    step: Annotated[StrictInt, Field(ge=-1, le=2**31)] | None = None
    phase: Annotated[StrictStr, Field(max_length=64)] | None = None
    config: Annotated[StrictStr, Field(max_length=4096)] | None = None
    reaper_pid: Annotated[StrictInt, Field(ge=0, le=2**32)] | None = None
    children: Annotated[list[list[StrictInt | StrictFloat]], Field(max_length=100_000)] | None = None


LOCK_MAX_BYTES = 4 * 2**20


def load_lock(path: Path) -> dict[str, Any] | None:
    """The run lock at `path` (None when there is none); FileReadError when something else is there:
    a FIFO, a device, a link to one, not JSON, nested too deeply, fields of the wrong shape."""
    from rlkit.config.files import present, read_model

    if not present(path):
        return None
    return read_model(path, LockFile, max_bytes=LOCK_MAX_BYTES,
                      fix="if no run of this experiment is in flight, delete it (the next run writes a new one)"
                      ).model_dump()


def read_lock(path: Path) -> dict[str, Any] | None:
    """The run lock, or None when there is none or it cannot be read (`load_lock` says why)."""
    from rlkit.config.files import FileReadError

    try:
        return load_lock(path)
    except FileReadError:
        return None


def heartbeat_age_s(lock: dict[str, Any]) -> float | None:
    try:
        beat = dt.datetime.fromisoformat(str(lock.get("heartbeat")))
    except ValueError:
        return None
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - beat).total_seconds()


def lock_is_stale(lock: dict[str, Any]) -> bool:
    """Same host: the trainer's pid is gone. Another host: no heartbeat for STALE_S."""
    if lock.get("host") == host():
        pid = lock.get("pid")
        return not (isinstance(pid, int) and same_process_alive(pid, None))
    age = heartbeat_age_s(lock)
    return age is None or age > STALE_S


def live_locks(logs: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The locks under `logs` whose run is still in flight."""
    found = []
    for path in sorted(logs.glob("*.lock")) if logs.is_dir() else ():
        lock = read_lock(path)
        if lock is not None and not lock_is_stale(lock):
            found.append((path, lock))
    return found
