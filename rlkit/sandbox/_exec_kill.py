"""Kill a timed-out `docker exec` process and everything it started.

The Engine API has no "kill exec". When dockerd runs on this host (the normal case),
the exec's host pid is visible in /proc, so we kill its whole process tree from outside.
"""

from __future__ import annotations

import os
import signal
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


def kill_process_tree(pid: int) -> int:
    """SIGKILL `pid` and its descendants; returns how many were signalled."""
    killed = 0
    for target in process_tree(pid):
        try:
            os.kill(target, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed
