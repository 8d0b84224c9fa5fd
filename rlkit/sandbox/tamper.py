"""Sandbox tamper check: which changes to a sandbox's filesystem can steer its verifier.

After the agent's turn and before the tests run, the sandbox is compared with its image
(docker: the container's overlay upper layer, else the Engine's container diff; k8s: `find -newerct <container start>` in the pod)
and the changed paths are classified here. Flagged are changes that can change how a
task's own tests run, rather than what they test:

* pytest configuration (`conftest.py`, `pytest.ini`, `tox.ini`, `setup.cfg`, ...) in the
  tests folder's ancestors or in the working directory and its ancestors: pytest loads
  conftest files from parent folders and takes its rootdir ini from them;
* interpreter start-up hooks: `sitecustomize.py`, `usercustomize.py`, any `.pth` file;
* edits (changes, deletions) under a Python interpreter's stdlib or site-packages;
* a module that shadows pytest (`pytest.py`, `_pytest/`, ...) where `python -m pytest` finds it
  first (the working directory, the tests folder and their ancestors);
* edits to the system's command folders (`/usr/bin`, ...), and new commands there that shadow
  an interpreter or test runner.

New packages in site-packages and new, unrelated commands are listed but not flagged: an
agent may install what a task needs. Bytecode caches added under the interpreter are noise
(any `python` run writes them) and are ignored. Pure logic; the backends collect the paths.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

# added, changed, deleted (docker's letters); "?" added-or-changed (k8s: find cannot tell)
ChangeKind = Literal["A", "C", "D", "?"]
_DOCKER_KINDS: dict[int, ChangeKind] = {0: "C", 1: "A", 2: "D"}

PYTEST_CONFIG_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg"})
# pyproject.toml configures pytest too, but agents edit it in their project: only above /tests.
ANCESTOR_ONLY_CONFIG = frozenset({"pyproject.toml"})
STARTUP_HOOKS = re.compile(r"^(sitecustomize|usercustomize)(\.[\w-]+)?\.(py|pyc)$")
SHADOW_MODULES = frozenset({"pytest.py", "pytest", "_pytest", "py.py", "pluggy", "pluggy.py"})
INTERPRETER_DIR = re.compile(r"^/(usr/|usr/local/|opt/[^/]+/)?lib(64)?/python3[^/]*/|/(site|dist)-packages/")
COMMAND_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
SHADOW_COMMANDS = re.compile(r"^(python[\d.]*|pytest|py\.test|pip[\d.]*|uv|uvx|bash|sh|dash|env|timeout|node|npm|"
                             r"npx|go|cargo|java|ruby|perl)$")
# Trees the rlkit scaffolds own (an agent's own runtime, never used by a task's tests).
AGENT_OWNED = ("/opt/openhands-sdk-venv/", "/installed-agent/", "/logs/")
MAX_LISTED = 20_000  # paths kept in the trial folder's list; more are counted


@dataclass(frozen=True)
class Change:
    path: str
    kind: ChangeKind


@dataclass(frozen=True)
class Finding:
    path: str
    kind: ChangeKind
    rule: str  # pytest_config | startup_hook | pth_file | interpreter_edit | shadow_module | command_edit


def from_docker_diff(entries: Iterable[dict[str, Any]] | None) -> list[Change]:
    """The Engine API's `GET /containers/{id}/changes` answer as Changes."""
    return [Change(e["Path"], _DOCKER_KINDS.get(int(e.get("Kind", 0)), "C")) for e in entries or ()]


def _ancestors(path: str) -> set[str]:
    """`path` and every folder above it."""
    pure = PurePosixPath(path or "/")
    return {str(pure), *map(str, pure.parents)}


def _leaves(changes: Sequence[Change]) -> list[Change]:
    """Changes that are not a folder holding another listed change (docker lists each
    changed file's parents as changed: those say nothing by themselves)."""
    parents: set[str] = set()
    for change in changes:
        parents.update(str(p) for p in PurePosixPath(change.path).parents)
    return [c for c in changes if c.path not in parents]


def _rule(change: Change, near_tests: set[str], near_workdir: set[str]) -> str | None:
    path = PurePosixPath(change.path)
    name, parent = path.name, str(path.parent)
    if str(path).startswith(AGENT_OWNED):
        return None
    if name in PYTEST_CONFIG_FILES and (parent in near_tests or parent in near_workdir):
        return "pytest_config"
    if name in ANCESTOR_ONLY_CONFIG and parent in near_tests:
        return "pytest_config"
    if STARTUP_HOOKS.match(name):
        return "startup_hook"
    if name.endswith(".pth"):
        return "pth_file"
    if INTERPRETER_DIR.search(change.path) is not None:
        if change.kind in ("A", "?") and ("__pycache__" in path.parts or name.endswith(".pyc")):
            return None  # bytecode any python run writes
        if change.kind != "A":
            return "interpreter_edit"
        return "shadow_module" if name in SHADOW_MODULES or "_pytest" in path.parts else None
    if _shadowing_part(path, near_tests | near_workdir):
        return "shadow_module"
    if parent in COMMAND_DIRS and (change.kind != "A" or SHADOW_COMMANDS.match(name)):
        return "command_edit"
    return None


def _shadowing_part(path: PurePosixPath, roots: set[str]) -> bool:
    """`path` is, or lies in, a pytest-shadowing module directly inside one of `roots`."""
    for ancestor in [path, *path.parents]:
        if str(ancestor.parent) in roots and ancestor.name in SHADOW_MODULES:
            return True
    return False


def classify(changes: Sequence[Change], workdir: str | None, tests_dir: str = "/tests") -> list[Finding]:
    """The changes that can steer a verifier, one Finding each (empty: nothing suspect)."""
    near_tests = _ancestors(tests_dir)
    near_workdir = _ancestors(workdir) if workdir else {"/"}
    findings = []
    for change in _leaves(changes):
        rule = _rule(change, near_tests, near_workdir)
        if rule is not None:
            findings.append(Finding(change.path, change.kind, rule))
    return findings


def report(changes: Sequence[Change], findings: Sequence[Finding], workdir: str | None,
           source: str) -> dict[str, Any]:
    """What the trial folder keeps (`sandbox_changes.json`)."""
    ordered = sorted(changes, key=lambda c: c.path)
    return {
        "source": source,
        "workdir": workdir,
        "suspect": bool(findings),
        "findings": [{"path": f.path, "kind": f.kind, "rule": f.rule} for f in findings],
        "changes": [f"{c.kind} {c.path}" for c in ordered[:MAX_LISTED]],
        "changes_not_listed": max(0, len(ordered) - MAX_LISTED),
    }


def find_changes_script(since_epoch: int | None) -> str:
    """Shell that prints the working directory, then every path on the root filesystem (and the
    working directory's, when another) whose inode changed since `since_epoch` (ctime: an
    agent cannot set it back). Without a start time, the pod's /etc/hostname (written before
    the container started) is the reference."""
    newer = f"-newerct @{since_epoch}" if since_epoch is not None else "-cnewer /etc/hostname"
    return (f'wd=$(pwd); echo "$wd"; find / "$wd" -xdev {newer} -print 2>/dev/null '
            f'| head -n {MAX_LISTED * 2}; true')


def from_find_output(stdout: str) -> tuple[str | None, list[Change]]:
    """(working dir, changes) from `find_changes_script`'s output. find cannot see deletions,
    nor tell a new file from a changed one: everything is "?" (added-or-changed), which the
    rules read as an edit where the difference matters (stdlib, site-packages, /usr/bin)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, []
    workdir, seen, changes = lines[0].strip(), set(), []
    for line in lines[1:]:
        path = line.rstrip("/") or "/"
        if path not in seen and path != "/":
            seen.add(path)
            changes.append(Change(path, "?"))
    return workdir, changes


@dataclass(frozen=True)
class Snapshot:
    """What a sandbox's filesystem looks like next to its image."""

    changes: list[Change]
    workdir: str | None
    source: str  # "overlay-upper" | "docker-diff" | "k8s-find"


async def snapshot(environment: Any) -> Snapshot | None:
    """The changes of a running rlkit sandbox since its image (None for a backend that cannot
    say: a user's own `pkg.mod:Environment`)."""
    from rlkit.sandbox.pool import run_blocking

    if environment.type() == "rlkit-docker" and environment.container_id:
        from rlkit.sandbox.docker_api import api_client

        api = api_client()
        container = environment.container_id
        info = await run_blocking(api.inspect_container, container)
        workdir = (info.get("Config") or {}).get("WorkingDir") or "/"
        changes = await run_blocking(overlay_changes, info.get("GraphDriver") or {})
        if changes is not None:
            return Snapshot(changes, workdir, "overlay-upper")
        entries = await run_blocking(api.diff, container)
        return Snapshot(from_docker_diff(entries), workdir, "docker-diff")
    if environment.type() == "rlkit-k8s" and environment.pod_name:
        since = await run_blocking(_container_started_epoch, environment.core_api, environment.pod_name,
                                   environment.opts.namespace)
        result = await environment.exec(find_changes_script(since), user="root", timeout_sec=120)
        workdir, changes = from_find_output(result.stdout or "")
        return Snapshot(changes, workdir, "k8s-find")
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
