"""Which run, and is it alive: a run config or an experiment name → its files, its lock, its processes.

Liveness reads files and the process table only: the run lock (logs/<exp>.lock, JSON written by
the trainer: pid, host, heartbeat, step, phase, config), then the lock's process and its
descendants classified as vLLM, proxy and Ray by command line. A verl run's lock is held by its
launcher on rank 0 (`rlkit train`); a run without one (a worker node's view, an older run) is
found by the experiment name on its processes' command lines.
"""

from __future__ import annotations

import datetime as dt
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.config.files import clip, exists, is_dir, is_file
from rlkit.config.owner import heartbeat_age_s, read_lock
from rlkit.config.paths import RunPaths
from rlkit.errors import UserError

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig

STALE_S = 120.0  # a heartbeat older than this on another host: the run is gone
QUIET_S = 3600.0  # a lock-less run (verl's) whose files were not written for this long is not running
ROLES = (("vllm", ("vllm.entrypoints", "vllm serve", "VLLM::")),
         ("proxy", ("rlkit.cli.main proxy", "rlkit proxy", "rlkit.cli.proxy", "rlkit.proxy", "litellm")),
         ("ray", ("raylet", "gcs_server", "ray::", "default_worker.py", "ray/dashboard")))


@dataclass
class RunRef:
    paths: RunPaths
    config_path: Path | None = None
    total_steps: int | None = None
    tool_call_parser: str | None = None
    settings: dict[str, str] = field(default_factory=dict)


def _from_config(path: Path, overrides: dict[str, str] | None = None) -> RunRef:
    from rlkit.config.resolve import resolve

    return ref_of(resolve(path, overrides=overrides))


def ref_of(resolved: ResolvedConfig) -> RunRef:
    """The run a resolved config names."""
    path = resolved.config_path
    cfg = resolved.config
    root = resolved.path("OUTPUT_DIR") or resolved.root
    paths = RunPaths(root, cfg.PROJECT_NAME or "default", cfg.EXP_NAME or "default")
    total = cfg.TOTAL_STEPS if cfg.TOTAL_STEPS > 0 else None
    return RunRef(paths, path, total, str(getattr(cfg.TOOL_CALL_PARSER, "value", cfg.TOOL_CALL_PARSER)),
                  {k: str(getattr(cfg, k)) for k in ("MAX_RESP", "TRAIN_BSZ", "N_RESP", "SCAFFOLD", "MODEL_PATH")})


EXP_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")  # an experiment name as a file name under logs/


def _checked_root(root: Path | None) -> Path:
    try:
        return (root or Path.cwd()).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(f"cannot use {clip(str(root), 200)!r} as the run folder ({type(exc).__name__})",
                        key="root", fix="pass the folder that holds logs/ and harbor_trials/") from None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def locate(target: str | None, root: Path | None = None, overrides: dict[str, str] | None = None) -> RunRef:
    """A run config path (with `overrides` on top), or an experiment name looked up under logs/ of `root`
    (default: the current folder). With nothing given: the most recently written run under logs/. A name that is
    neither (too long, a NUL, a path) is a UserError, never an OSError."""
    root = _checked_root(root)
    if target and (target.endswith(".env") or is_file(Path(target))):
        return _from_config(Path(target), overrides)
    if target and not EXP_RE.match(target):
        raise UserError(f"no run {clip(target, 120)!r}: not a run config, and not an experiment name",
                        key="target", fix="pass a run config (rlkit status CFG.env) or an experiment name under "
                                          "logs/ (letters, digits, . _ -; at most 200)")
    logs = root / "logs"
    if not target:
        candidates = sorted((p for p in logs.glob("*.log") if not p.stem.endswith(("_vllm", "_proxy", "_reaper",
                                                                                   "_server", "_attempts", "_ray"))
                             and EXP_RE.match(p.stem)),
                            key=_mtime, reverse=True) if is_dir(logs) else []
        if not candidates:
            raise UserError(f"no run found under {logs}", fix="pass a run config: rlkit status CFG.env")
        target = candidates[0].stem
    exp = target
    lock = read_lock(logs / f"{exp}.lock")
    project = (lock or {}).get("project")
    if not isinstance(project, str) or not EXP_RE.match(project):  # a lock's project is a folder name, no path
        found = sorted((root / "harbor_trials").glob(f"*/{exp}"))
        project = found[0].parent.name if found else "default"
    if not exists(logs / f"{exp}.log") and not exists(logs / f"{exp}.jsonl") and lock is None:
        raise UserError(f"no run {exp!r} under {root} (no logs/{exp}.log)",
                        fix="pass the run config (rlkit status CFG.env) or run from the folder holding logs/")
    ref = RunRef(RunPaths(root, project, exp))
    config = (lock or {}).get("config")
    if config and is_file(Path(config)):
        recorded = (lock or {}).get("overrides")
        try:
            return _from_config(Path(config), recorded if isinstance(recorded, dict) else None)
        except UserError:
            pass
    return ref


def _role(cmdline: str) -> str | None:
    for role, marks in ROLES:
        if any(mark in cmdline for mark in marks):
            return role
    return None


@dataclass
class Liveness:
    state: str                      # running | stale-lock | finished | stopped | unknown
    pid: int | None = None
    heartbeat_age_s: float | None = None
    phase: str | None = None
    lock_step: int | None = None
    processes: dict[str, list[int]] = field(default_factory=dict)  # role -> pids

    @property
    def alive(self) -> bool:
        return self.state == "running"


def _age(path: Path) -> float:
    import time

    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


def _heartbeat_age(lock: dict[str, Any]) -> float | None:
    """Seconds since the lock's heartbeat (one without a timezone is UTC, as the trainer writes it)."""
    try:
        return heartbeat_age_s(lock)
    except (OverflowError, ValueError):
        return None


def _pids_naming(exp: str) -> list[int]:
    """Processes whose command line names the experiment (verl's trainer.experiment_name=, or its log)."""
    import psutil

    marks = (f"experiment_name={exp}".encode(), f"/{exp}.log".encode())
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: psutil's slower walk
        return [p.pid for p in psutil.process_iter(["cmdline"])
                if any(m.decode() in " ".join(p.info.get("cmdline") or []) for m in marks)]
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if any(m in cmd for m in marks):
                found.append(int(entry.name))
    return found


def _scan(pid: int | None, exp: str, extra: list[int]) -> dict[str, list[int]]:
    import psutil

    found: dict[str, list[int]] = {}
    procs: list[psutil.Process] = []
    if pid:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
    for child in extra:
        try:
            procs.append(psutil.Process(child))
        except psutil.Error:
            continue
    if not procs and exp:  # no lock (a verl run): processes naming the experiment
        for child in _pids_naming(exp):
            try:
                procs.append(psutil.Process(child))
            except psutil.Error:
                continue
    seen: set[int] = set()
    for p in procs:
        if p.pid in seen:
            continue
        seen.add(p.pid)
        try:
            cmd = " ".join(p.cmdline()) or p.name()
        except psutil.Error:
            continue
        role = _role(cmd) or ("trainer" if p.pid == pid else None)
        if role:
            found.setdefault(role, []).append(p.pid)
    return found


def lock_owner_alive(lock: dict[str, Any]) -> bool:
    """The lock's trainer still runs: on this host its pid lives and started before the lock was taken (not a
    reused pid); elsewhere its heartbeat is fresh."""
    pid = lock.get("pid")
    if lock.get("host") != socket.gethostname():
        age = _heartbeat_age(lock)
        return age is not None and age < STALE_S
    if not isinstance(pid, int) or pid <= 0:
        return False
    import psutil

    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return False
    try:
        taken = dt.datetime.fromisoformat(str(lock.get("started"))).timestamp()
    except (ValueError, OverflowError, OSError):
        return True
    return created <= taken + 2.0


def liveness(ref: RunRef, last_step: int | None, interrupted: bool = False) -> Liveness:
    """`interrupted`: a step folder past the last logged step exists (the run died inside that step)."""
    lock = read_lock(ref.paths.lock)
    if lock is not None:
        pid = lock.get("pid") if isinstance(lock.get("pid"), int) else None
        age = _heartbeat_age(lock)
        local = lock.get("host") == socket.gethostname()
        alive = lock_owner_alive(lock)
        extra = [int(c[0]) for c in lock.get("children") or [] if isinstance(c, list) and c]
        procs = _scan(pid if local and alive else None, ref.paths.exp, extra if local else [])
        return Liveness("running" if alive else "stale-lock", pid, age, lock.get("phase"), lock.get("step"), procs)
    # Without a lock only a run that wrote lately can be alive: a quiet log skips the process walk.
    recent = any(_age(path) < QUIET_S for path in (ref.paths.console_log, ref.paths.jsonl, ref.paths.vllm_log))
    procs = _scan(None, ref.paths.exp, []) if recent else {}
    if procs:
        return Liveness("running", processes=procs)
    if interrupted:
        return Liveness("stopped")
    if last_step is not None and ref.total_steps is not None:
        return Liveness("finished" if last_step >= ref.total_steps else "stopped")
    return Liveness("unknown")
