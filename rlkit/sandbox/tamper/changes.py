"""What changed in a sandbox since its image, read without trusting the sandbox.

docker: the container's overlay2 upper layer read on this host (every write, chmod, rename
or deletion leaves an entry there that nothing inside the container can take back), else the
Engine's own container diff; k8s: `find -newerct <container start>` in the pod (ctime cannot
be set back, but find is the pod's own binary: a backend without a host view trusts it).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from rlkit.sandbox.tamper.files import ArchiveReader, ExecReader, HostRootReader, SandboxFiles

# added, changed, deleted (docker's letters); "?" added-or-changed (k8s: find cannot tell)
ChangeKind = Literal["A", "C", "D", "?"]
_DOCKER_KINDS: dict[int, ChangeKind] = {0: "C", 1: "A", 2: "D"}
MAX_FOUND = 40_000


@dataclass(frozen=True)
class Change:
    path: str
    kind: ChangeKind


@dataclass(frozen=True)
class Snapshot:
    """A sandbox's filesystem next to its image, and a way to read its files."""

    changes: list[Change]
    workdir: str | None
    source: str  # "overlay-upper" | "docker-diff" | "k8s-find"
    files: SandboxFiles | None = None


def from_docker_diff(entries: Iterable[dict[str, Any]] | None) -> list[Change]:
    """The Engine API's `GET /containers/{id}/changes` answer as Changes."""
    return [Change(e["Path"], _DOCKER_KINDS.get(int(e.get("Kind", 0)), "C")) for e in entries or ()]


def find_changes_script(since_epoch: int | None, find: str = "find", head: str = "head") -> str:
    """Shell that prints the working directory, then every path on the root filesystem (and the
    working directory's, when another) whose inode changed since `since_epoch`. Without a
    start time, the pod's /etc/hostname (written before the container started) is the reference."""
    newer = f"-newerct @{since_epoch}" if since_epoch is not None else "-cnewer /etc/hostname"
    return f'wd=$(pwd); echo "$wd"; {find} / "$wd" -xdev {newer} -print 2>/dev/null | {head} -n {MAX_FOUND}; true'


def from_find_output(stdout: str) -> tuple[str | None, list[Change]]:
    """(working dir, changes) from `find_changes_script`'s output. find cannot see deletions,
    nor tell a new file from a changed one: everything is "?" (added-or-changed); the rules
    tell them apart with the image's own listing."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, []
    workdir, seen, changes = lines[0].strip(), set(), []
    for line in lines[1:MAX_FOUND]:
        path = line.rstrip("/") or "/"
        if path not in seen and path != "/":
            seen.add(path)
            changes.append(Change(path, "?"))
    return workdir, changes


async def snapshot(environment: Any, host_only: bool = False) -> Snapshot | None:
    """The changes of a running rlkit sandbox since its image (None for a backend that cannot
    say: a user's own `pkg.mod:Environment`; with `host_only`, also when they cannot be read on
    this host without running anything, the overlay's upper layer)."""
    from rlkit.sandbox.pool import run_blocking

    if environment.type() == "rlkit-docker" and environment.container_id:
        from rlkit.sandbox.docker_api import api_client

        api = api_client()
        container = environment.container_id
        info = await run_blocking(api.inspect_container, container)
        workdir = (info.get("Config") or {}).get("WorkingDir") or "/"
        driver = info.get("GraphDriver") or {}
        changes = await run_blocking(overlay_changes, driver)
        merged = (driver.get("Data") or {}).get("MergedDir") or ""
        if changes is not None and os.path.isdir(merged):
            return Snapshot(changes, workdir, "overlay-upper", HostRootReader(merged))
        if host_only:
            return None
        entries = await run_blocking(api.diff, container)
        return Snapshot(from_docker_diff(entries), workdir, "docker-diff", ArchiveReader(api, container))
    if environment.type() == "rlkit-k8s" and environment.pod_name and not host_only:
        profile = getattr(environment, "image_profile", None)
        tool = profile.tool if profile is not None else str
        since = await run_blocking(_container_started_epoch, environment.core_api, environment.pod_name,
                                   environment.opts.namespace)
        script = find_changes_script(since, tool("find"), tool("head"))
        result = await environment.exec(script, user="root", timeout_sec=120)
        workdir, changes = from_find_output(result.stdout or "")
        return Snapshot(changes, workdir, "k8s-find", ExecReader(environment, tool("bash")))
    return None


def overlay_changes(graph_driver: dict[str, Any]) -> list[Change] | None:
    """A container's changes read straight from its overlay2 upper layer (what `docker diff`
    computes, without the daemon walking the whole image: that takes ~1 s when dockerd runs
    overlay2 in its naive-diff mode). None when the layer is not on this host's disk."""
    data = graph_driver.get("Data") or {}
    upper = data.get("UpperDir") or ""
    if graph_driver.get("Name") != "overlay2" or not upper or not os.path.isdir(upper):
        return None
    lowers = [p for p in (data.get("LowerDir") or "").split(":") if p]
    changes: list[Change] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        rel = dirpath[len(upper):] or "/"
        for name in (*dirnames, *filenames):
            path = posixpath.join(rel, name)
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # overlay's whiteout: deleted
                kind: ChangeKind = "D"
            else:
                kind = "C" if any(os.path.lexists(lower + path) for lower in lowers) else "A"
            changes.append(Change(path, kind))
    return changes


def _container_started_epoch(core_api: Any, pod: str, namespace: str) -> int | None:
    """When the pod's container started (the kubelet's clock = the node's, which find reads),
    a second early so nothing written in the start second is missed."""
    status = getattr(core_api.read_namespaced_pod(pod, namespace), "status", None)
    for cs in getattr(status, "container_statuses", None) or []:
        started = getattr(getattr(getattr(cs, "state", None), "running", None), "started_at", None)
        if started is not None:
            return int(started.timestamp()) - 1
    return None
