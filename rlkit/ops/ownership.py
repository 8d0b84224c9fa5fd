"""Whose is a sandbox, and is its owner still running? Read from the sandbox's labels.

    orphan      mine, and its owner is gone (pid dead or reused here; the run's lock stale elsewhere)
    live        mine, and its owner still runs: left alone unless the run is named and forced
    other_user  labelled with another uid: listed, never removed without --other-users
    unowned     no owner uid recorded (made by hand, or before the owner labels): listed, removed
                only when its run is named (--experiment)
    unknown     mine on another host with no lock to read: left alone, listed
"Mine" is the label rlkit.owner_uid against this process's real uid: never a name from $USER.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from rlkit.config import owner as O
from rlkit.sandbox import labels as L


class Verdict(StrEnum):
    ORPHAN = "orphan"
    LIVE = "live"
    OTHER_USER = "other_user"
    UNOWNED = "unowned"
    UNKNOWN = "unknown"


def run_lock(labels: dict[str, str], output_root: Path) -> dict | None:
    """The lock of the run that owns these labels (a `<exp>_val` sandbox belongs to run `<exp>`)."""
    exp = labels.get(L.EXPERIMENT, "")
    for name in (exp, exp.removesuffix("_val")):
        if name:
            lock = O.read_lock(output_root / "logs" / f"{name}.lock")
            if lock is not None:
                return lock
    return None


def verdict(labels: dict[str, str], output_root: Path, *, any_user: bool = False) -> tuple[Verdict, str]:
    """(verdict, why) for one sandbox's labels; `any_user` judges other users' sandboxes by liveness too."""
    uid_text = labels.get(L.OWNER_UID, "")
    if not uid_text.isdigit():
        return Verdict.UNOWNED, "no owner uid recorded (made by hand, or before owner labels)"
    if int(uid_text) != O.uid() and not any_user:
        name = labels.get(L.OWNER_USER) or "?"
        return Verdict.OTHER_USER, f"owned by uid {uid_text} ({name})"
    pid_text = labels.get(L.OWNER_PID, "")
    if not pid_text.isdigit():
        return Verdict.UNOWNED, "no owner pid recorded"
    pid, start = int(pid_text), O._float(labels.get(L.OWNER_START))
    owner_host = labels.get(L.OWNER_HOST, "")
    if not owner_host or owner_host == L.label_value(O.host()):
        if O.same_process_alive(pid, start):
            return Verdict.LIVE, f"owner pid {pid} is running"
        reused = O.process_start(pid) is not None
        return Verdict.ORPHAN, f"owner pid {pid} " + ("was reused by another process" if reused else "is gone")
    lock = run_lock(labels, output_root)
    if lock is None:
        return Verdict.UNKNOWN, f"owner pid {pid} on {owner_host}; no run lock under {output_root}/logs"
    if O.lock_is_stale(lock):
        age = O.heartbeat_age_s(lock)
        return Verdict.ORPHAN, f"run on {owner_host}: heartbeat " + (f"{age:.0f} s old" if age else "unreadable")
    return Verdict.LIVE, f"run on {owner_host} is alive (heartbeat fresh)"
