"""Labels on every sandbox (docker container or k8s pod) so a reaper can always find them.

Keys are the same on both backends. Values are sanitised to what k8s label values allow
(63 chars of [A-Za-z0-9._-]), which docker accepts too.

The owner labels (uid, host, pid and the pid's start time) let `rlkit cleanup` remove only
orphans: sandboxes whose owning process is gone (a reused pid has another start time).
Ownership is the numeric uid (the creating process's real uid); the user name beside it is
for people reading `docker ps`, never compared.
The owner is the process named by RLKIT_OWNER_PID (rlkit.config.owner) when a launcher set
it, else the process that creates the sandbox.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from rlkit.config import owner as _owner

MANAGED = "rlkit.managed"
PROJECT = "rlkit.project"
EXPERIMENT = "rlkit.experiment"
STEP = "rlkit.step"
SESSION = "rlkit.session"
TASK = "rlkit.task"
OWNER_PID = "rlkit.owner_pid"
OWNER_HOST = "rlkit.owner_host"
OWNER_USER = "rlkit.owner_user"  # the uid's login name, for reading only
OWNER_UID = "rlkit.owner_uid"  # the real uid of the owner: what ownership is decided by
OWNER_START = "rlkit.owner_start"  # the owner pid's create time, 2 decimals (a reused pid differs)
ALL_KEYS = (MANAGED, PROJECT, EXPERIMENT, STEP, SESSION, TASK, OWNER_PID, OWNER_HOST, OWNER_USER, OWNER_UID,
            OWNER_START)

_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(value: object) -> str:
    """A k8s-safe label value: [A-Za-z0-9._-], ≤63 chars, alnum at both ends."""
    text = _BAD.sub("-", str(value))[:63].strip("-._")
    return text


@dataclass(frozen=True)
class SandboxLabels:
    """Who a sandbox belongs to. Defaults come from RLKIT_* env vars set by the runner."""

    project: str = ""
    experiment: str = ""
    step: str = ""
    session: str = ""
    task: str = ""

    @classmethod
    def from_env(cls, **overrides: object) -> SandboxLabels:
        values = {
            "project": os.environ.get("RLKIT_PROJECT", os.environ.get("PROJECT_NAME", "")),
            "experiment": os.environ.get("RLKIT_EXPERIMENT", os.environ.get("EXP_NAME", "")),
            "step": os.environ.get("RLKIT_STEP", ""),
        }
        values.update({k: "" if v is None else str(v) for k, v in overrides.items()})
        return cls(**values)

    def as_dict(self) -> dict[str, str]:
        owner = _owner.owner_env()
        return {
            MANAGED: "1",
            PROJECT: label_value(self.project),
            EXPERIMENT: label_value(self.experiment),
            STEP: label_value(self.step),
            SESSION: label_value(self.session),
            TASK: label_value(self.task),
            OWNER_PID: owner[_owner.OWNER_PID_ENV],
            OWNER_HOST: label_value(_owner.host()),
            OWNER_USER: label_value(_owner.me()),
            OWNER_UID: str(_owner.uid()),
            OWNER_START: owner[_owner.OWNER_START_ENV],
        }


def selector(project: str | None = None, experiment: str | None = None) -> dict[str, str]:
    """Label filter matching managed sandboxes, optionally of one project/experiment."""
    wanted = {MANAGED: "1"}
    if project:
        wanted[PROJECT] = label_value(project)
    if experiment:
        wanted[EXPERIMENT] = label_value(experiment)
    return wanted
