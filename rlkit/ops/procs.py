"""rlkit's server processes (vLLM, proxy / litellm workers, dashboard, Ray daemons): which are orphans.

A process is rlkit's when its command line carries one of rlkit.config.owner's markers.
It is an orphan (and may be stopped) only when it can be traced to an owner that is gone:
  - its environment names an owner (RLKIT_OWNER_PID/START, set by rlkit's launchers) that is
    dead or whose pid was reused;
  - or a stale run lock lists it among the run's processes (pid and start time);
  - or, with no owner recorded, it is an rlkit command (proxy, dashboard) or a vLLM with rlkit's
    scratch dirs that was reparented to init (its parent is gone).
Processes of a live run (its lock's pid, the lock's processes, their descendants) are never
stopped; nor are other users' processes (by real uid), the trainer itself, or anything else.
Ray daemons nobody can be traced to (a `ray start` by hand) are left alone. A scan scoped to a
project sees only processes whose owner environment names that project, or that a stale lock
of that project lists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rlkit.config import owner as O

TERM_GRACE_S = 5.0
VLLM_ENV_HINTS = ("vllm_scratch", "rlkit-vllm-")


@dataclass
class Proc:
    pid: int
    start: float
    kind: str  # vllm | proxy | dashboard | ray | run
    cmd: str
    user: str
    orphan: bool
    why: str

    def describe(self) -> str:
        return f"{self.kind} pid {self.pid}: {self.cmd[:90]}  ({self.why})"


def kind_of(cmd: str, name: str = "") -> str | None:
    for marker in O.RUN_MARKERS:
        if marker in cmd:
            return "run"
    for kind, markers in O.SERVER_MARKERS.items():
        if any(m in cmd or name.startswith(m) for m in markers):
            return kind
    return None


def cmdline(proc) -> str:
    """A psutil process's command line on one line (its name when that is empty; '' once it is gone).
    Arguments may hold newlines (a `python -c` program): they become spaces, so a report line stays one line."""
    import psutil

    try:
        return " ".join(" ".join(proc.cmdline()).split()) or proc.name()
    except psutil.Error:
        return ""


def _lock_members(output_roots: list[Path], project: str | None = None,
                  experiment: str | None = None) -> tuple[set[int], dict[tuple[int, int], str]]:
    """(pids of live runs and their descendants, {(pid, start): lock} of stale locks' processes; with a
    project, only the stale locks of its runs)."""
    import psutil

    protected: set[int] = set()
    stale: dict[tuple[int, int], str] = {}
    for root in output_roots:
        logs = root / "logs"
        for path in sorted(logs.glob("*.lock")) if logs.is_dir() else ():
            lock = O.read_lock(path)
            if lock is None:
                continue
            members = [(lock.get("pid"), None), *[(c[0], c[1]) for c in lock.get("children") or [] if len(c) == 2]]
            if O.lock_is_stale(lock):
                if project and (lock.get("project") != project or (experiment and lock.get("exp") != experiment)):
                    continue
                for pid, start in members:
                    if start is not None:
                        stale[(int(pid), int(start))] = str(path)
                continue
            for pid, start in members:
                if isinstance(pid, int) and O.same_process_alive(pid, start):
                    protected.add(pid)
                    try:
                        protected.update(p.pid for p in psutil.Process(pid).children(recursive=True))
                    except psutil.Error:
                        pass
    return protected, stale


def scan(output_roots: list[Path], project: str | None = None, experiment: str | None = None) -> list[Proc]:
    """This user's (real uid's) rlkit processes, each judged orphan or not; with a project, only its runs'."""
    import psutil

    me, uid, mine = O.me(), O.uid(), os.getpid()
    skip = {mine, *(p.pid for p in psutil.Process(mine).parents())}
    protected, stale = _lock_members(output_roots, project, experiment)
    found: list[Proc] = []
    for proc in psutil.process_iter(["pid", "ppid", "uids", "create_time", "name"]):
        info = proc.info
        if info["pid"] in skip or info["uids"] is None or info["uids"].real != uid:
            continue
        cmd = cmdline(proc)
        kind = kind_of(cmd, info["name"] or "")
        if kind is None:
            continue
        start = info["create_time"] or 0.0
        judged = _judge(proc, kind, cmd, start, protected, stale, project, experiment)
        if judged is not None:
            found.append(Proc(info["pid"], start, kind, cmd, me, *judged))
    return found


def _judge(proc, kind: str, cmd: str, start: float, protected: set[int], stale: dict[tuple[int, int], str],
           project: str | None = None, experiment: str | None = None) -> tuple[bool, str] | None:
    """(orphan, why); None for a process outside the scope (another project's, or one nobody owns)."""
    import psutil

    listed = stale.get((proc.pid, int(start)))
    try:
        environ = proc.environ()
    except psutil.Error:
        environ = {}
    owner = O.Owner.from_env(environ, O.me())
    if project and listed is None and (owner is None or not owner.in_scope(project, experiment)):
        return None
    if kind == "run":
        return False, "a run (never stopped by cleanup)"
    if proc.pid in protected:
        return False, "belongs to a live run (its lock)"
    if listed is not None:
        return True, f"listed by stale lock {listed}"
    if owner is not None:
        if owner.alive():
            return False, f"owner pid {owner.pid} is running"
        return True, f"owner pid {owner.pid} is gone"
    try:
        reparented = proc.ppid() == 1 or proc.parent() is None
    except psutil.Error:
        return False, "vanished"
    if kind in ("proxy", "dashboard") and "rlkit" in cmd and reparented:
        return True, "rlkit command whose parent is gone"
    if kind == "vllm" and reparented and any(h in v for v in environ.values() for h in VLLM_ENV_HINTS):
        return True, "rlkit's vLLM whose parent is gone"
    return False, "no owner recorded and its parent lives" if not reparented else "not traceable to an rlkit run"


def stop(procs: list[Proc]) -> tuple[list[Proc], list[str]]:
    """SIGTERM, then SIGKILL after TERM_GRACE_S; only the same processes (pid and start time).
    A dead run's Ray goes in Ray's own order (raylet first, GCS last): all at once, its monitor
    outlived SIGTERM and held every cleanup for the whole grace."""
    import psutil

    from rlkit.launch.ray_node import ray_stop_order

    targets, errors = [], []
    for p in procs:
        try:
            live = psutil.Process(p.pid)
            if abs(live.create_time() - p.start) < O.START_TOLERANCE_S:
                targets.append((p, live))
        except psutil.Error:
            continue
    for stage in ray_stop_order(targets, cmd=lambda target: target[0].cmd):
        errors += O.stop_processes([live for _, live in stage], TERM_GRACE_S)
    return [p for p, _ in targets], errors


def listeners(port: int) -> list[tuple[int | None, str]]:
    """(pid, command line) of whatever listens on TCP `port` (pid None when it is not visible to us)."""
    import psutil

    out = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            cmd = ""
            if conn.pid:
                try:
                    cmd = cmdline(psutil.Process(conn.pid))
                except psutil.Error:
                    pass
            out.append((conn.pid, cmd))
    return out
