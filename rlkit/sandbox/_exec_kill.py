"""Kill a timed-out command and everything it started.

The Engine API has no "kill exec". When dockerd runs on this host (the normal case),
the exec's host pid is visible in /proc, so we kill its whole process tree from outside.
Inside a container (session commands, k8s pods) `KILL_TREE_BASH` does the same in bash.

Both stop the whole tree top-down before killing it: a process that is still starting
children while the tree is walked would otherwise leave a child behind (it appears after
the walk passed, and outlives its killed parent).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _children_map(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may contain spaces.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def process_tree(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pid` and all its descendants, parents first."""
    children = _children_map(proc)
    order, stack = [], [pid]
    while stack:
        current = stack.pop()
        order.append(current)
        stack.extend(children.get(current, []))
    return order


def _signal_all(pids: list[int], sig: int) -> int:
    sent = 0
    for target in pids:
        try:
            os.kill(target, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, T, Z...), "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2:][:1]


def _wait_stopped(pids: list[int], timeout_s: float = 1.0) -> None:
    """kill() only queues SIGSTOP: a process that has not run since may still finish a fork."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pids)
    while waiting and time.monotonic() < deadline:
        waiting = [p for p in waiting if _state(p) not in ("", "T", "t", "Z", "X")]
        if waiting:
            time.sleep(0.001)


def kill_process_tree(pid: int) -> int:
    """SIGSTOP `pid` and its descendants, then SIGKILL them; returns how many were killed."""
    stopped: list[int] = []
    for _ in range(20):  # until a walk finds nobody new: every process of the tree is stopped
        new = [p for p in process_tree(pid) if p not in stopped]
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)  # parents first
        _wait_stopped(new)  # a fork under way when its parent was signalled lands in the next walk
        stopped += new
    tree = process_tree(pid)
    return _signal_all([*reversed(tree), *(p for p in stopped if p not in tree)], signal.SIGKILL)


# Pure bash over /proc (no procps in the image): `kill_tree PID` stops the tree top-down, then
# kills it bottom-up (a child whose parent died first is reparented out of the walk's reach).
KILL_TREE_BASH = (
    "walk() { local dir child key value; [ \"$1\" = STOP ] && kill -STOP \"$2\" 2>/dev/null; "
    "for dir in /proc/[0-9]*; do child=${dir#/proc/}; "
    "while read -r key value; do if [ \"$key\" = PPid: ]; then [ \"$value\" = \"$2\" ] && walk \"$1\" \"$child\"; "
    "break; fi; done 2>/dev/null < \"$dir/status\"; done; "
    "[ \"$1\" = KILL ] && kill -9 \"$2\" 2>/dev/null; }; "
    "kill_tree() { walk STOP \"$1\"; walk KILL \"$1\"; }; ")
