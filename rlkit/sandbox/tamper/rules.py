"""The judgement: which of a sandbox's changes can steer its verifier, judged by what they do.

Against the image's profile (`profile.py`), every change the agent left is judged where it
lies, not by its name:

* PATH: a new command that comes before one of the same name the image has (command_shadow),
  a change to a command the image has (command_edit), or to a tool the verifier itself runs
  (verifier_tool). A new command that shadows nothing is allowed.
* libraries: a change to a library the loader finds (library_edit), a new one named like one
  the image has (library_shadow), /etc/ld.so.preload (library_preload), the loader's search
  folders (library_path). A changed /etc/ld.so.cache is rebuilt by the image's ldconfig
  before the tests (apt rewrites it when it installs a package).
* symlinks the image's paths run through (`/bin -> usr/bin`, alternatives): redirect; the
  files they lead to: link_target_edit.
* pytest configuration where the verifier's pytest reads it (`pytest_command.py`; an unknown
  command: above the tests folder or in the working dir): pytest_config.
* Python's import paths: see `_python.py`.

Trees that belong to rlkit's agents, the tests folder (replaced before the tests) and /logs
are not judged. Pure logic over the change list, the profile and file reads.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rlkit.sandbox.tamper._python import PythonArea
from rlkit.sandbox.tamper.changes import Change, ChangeKind
from rlkit.sandbox.tamper.files import SandboxFiles
from rlkit.sandbox.tamper.profile import ImageProfile
from rlkit.sandbox.tamper.pytest_command import UNKNOWN, ConfigScope

PYTEST_CONFIG_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg"})
# pyproject.toml configures pytest too, but agents edit it in their project: only above /tests.
ANCESTOR_ONLY_CONFIG = frozenset({"pyproject.toml"})
# Trees the rlkit scaffolds own (an agent's own runtime, never used by a task's tests).
AGENT_OWNED = ("/opt/openhands-sdk-venv/", "/opt/rlkit-agents/", "/installed-agent/", "/logs/")
LOADER_PRELOAD = "/etc/ld.so.preload"
LOADER_CONFIG = ("/etc/ld.so.conf", "/etc/ld.so.conf.d")
LOADER_CACHE = "/etc/ld.so.cache"
MAX_LISTED = 20_000  # paths kept in the trial folder's list; more are counted


@dataclass(frozen=True)
class Finding:
    path: str
    kind: ChangeKind
    rule: str
    detail: str = ""


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)  # bytecode caches deleted before the tests
    rebuild_loader_cache: bool = False
    notes: list[Finding] = field(default_factory=list)  # inert changes worth recording

    @property
    def suspect(self) -> bool:
        return bool(self.findings)


def _ancestors(path: str) -> set[str]:
    """`path` and every folder above it."""
    pure = PurePosixPath(path or "/")
    return {str(pure), *map(str, pure.parents)}


def _leaves(changes: Sequence[Change]) -> list[Change]:
    """Changes that are not a folder holding another listed change (docker lists each
    changed file's parents as changed: those say nothing by themselves)."""
    parents: set[str] = set()
    for change in changes:
        path = change.path
        while (cut := path.rfind("/")) > 0 and (path := path[:cut]) not in parents:
            parents.add(path)
    return [c for c in changes if c.path not in parents]


class _NoFiles:
    async def read_text(self, path: str) -> str | None:
        return None

    async def list_dir(self, path: str) -> list[str] | None:
        return None


class Judge:
    """The rules of one image, for one sandbox's working dir and tests folder."""

    def __init__(self, profile: ImageProfile, workdir: str | None, tests_dir: str = "/tests",
                 scope: ConfigScope = UNKNOWN) -> None:
        self.profile = profile
        self.tests_dir = tests_dir.rstrip("/") or "/"
        near_tests = _ancestors(self.tests_dir)
        near = near_tests | (_ancestors(workdir) if workdir else {"/"})
        # where the verifier's pytest reads config files (unknown command: above the tests, the working dir)
        self.ini_dirs = set(scope.ini_dirs) if scope.ini_dirs is not None else near
        self.pyproject_dirs = set(scope.ini_dirs) if scope.ini_dirs is not None else near_tests
        self.conftest_dirs = set(scope.conftest_dirs) if scope.conftest_dirs is not None else near
        self.python = PythonArea(profile, workdir)
        self.tools = {path: name for name, path in profile.tools.items()}
        self.path_dirs = {d: i for i, d in enumerate(profile.path_dirs)}
        self.lib_dirs = set(profile.lib_dirs)
        self.lib_names = {n for d in profile.lib_dirs for n, k in profile.entries.get(d, {}).items() if k in "fl"}
        self.link_targets: dict[str, str] = {}
        for link, target in profile.links.items():
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
            self.link_targets.setdefault(resolved, link)

    async def judge(self, changes: Sequence[Change], files: SandboxFiles | None = None) -> Verdict:
        files = files or _NoFiles()
        verdict = Verdict()
        judged: set[str] = set()
        for change in changes:  # a replaced symlink may now be a folder with children: not only leaves
            if change.path in self.profile.links and not change.path.startswith(AGENT_OWNED):
                verdict.findings.append(Finding(change.path, change.kind, "redirect",
                                                f"the image's symlink to {self.profile.links[change.path]} changed"))
                judged.add(change.path)
        for change in _leaves(changes):
            if change.path in judged or self._not_judged(change.path):
                continue
            finding = await self._judge_one(change, files, verdict)
            if finding is not None:
                verdict.findings.append(finding)
        return verdict

    def _not_judged(self, path: str) -> bool:
        return (path.startswith(AGENT_OWNED) or path == self.tests_dir
                or path.startswith(self.tests_dir.rstrip("/") + "/"))

    async def _judge_one(self, change: Change, files: SandboxFiles, verdict: Verdict) -> Finding | None:
        path, kind = change.path, change.kind
        parent, name = posixpath.split(path)

        def found(rule: str, detail: str = "") -> Finding:
            return Finding(path, kind, rule, detail)

        if path in self.tools:
            return found("verifier_tool", f"the verifier runs {self.tools[path]} from here")
        if path == LOADER_PRELOAD and kind != "D":
            return found("library_preload", "the loader would load it into every program")
        if path in LOADER_CONFIG or parent == LOADER_CONFIG[1]:
            return found("library_path", "changes where the loader finds libraries")
        if path == LOADER_CACHE:
            verdict.rebuild_loader_cache = True
            return None
        if name == "conftest.py" and parent in self.conftest_dirs:
            return found("pytest_config", "pytest loads it for the tests")
        if name in PYTEST_CONFIG_FILES - {"conftest.py"} and parent in self.ini_dirs:
            return found("pytest_config", "pytest reads it for the tests")
        if name in ANCESTOR_ONLY_CONFIG and parent in self.pyproject_dirs:
            return found("pytest_config", "pytest reads it for the tests")
        python = await self.python.judge(path, kind, files.read_text, files.list_dir)
        if python.remove:
            verdict.remove.append(path)
            return None
        if python.note:
            verdict.notes.append(Finding(path, kind, "inert", python.note))
            return None
        if python.rule:
            return found(python.rule, python.detail)
        if parent in self.path_dirs:
            rule = self._command(parent, name, kind)
            if rule:
                return found(*rule)
        if parent in self.lib_dirs:
            rule = self._library(parent, name, kind)
            if rule:
                return found(*rule)
        if path in self.link_targets:
            return found("link_target_edit", f"the image's {self.link_targets[path]} leads here")
        return None

    def _command(self, folder: str, name: str, kind: str) -> tuple[str, str] | None:
        existing = self.profile.entries.get(folder, {}).get(name)
        if existing is not None and kind != "A":
            return "command_edit", "a command the image has changed"
        if existing == "d":
            return None
        later = self.profile.path_dirs[self.path_dirs[folder] + 1:]
        shadowed = next((d for d in later if name in self.profile.entries.get(d, {})), None)
        if shadowed is not None and kind != "D":
            return "command_shadow", f"found on PATH before {shadowed}/{name}"
        return None

    def _library(self, folder: str, name: str, kind: str) -> tuple[str, str] | None:
        existing = self.profile.entries.get(folder, {}).get(name)
        if existing in ("d", "p"):
            return None
        if existing is not None and kind != "A":
            return "library_edit", "a library the loader finds changed"
        if name in self.lib_names and kind != "D":
            return "library_shadow", "a library named like one the image has"
        return None


async def judge(changes: Sequence[Change], profile: ImageProfile, files: SandboxFiles | None, workdir: str | None,
                tests_dir: str = "/tests", scope: ConfigScope = UNKNOWN) -> Verdict:
    """The changes that can steer a verifier (findings), and what to undo before the tests."""
    return await Judge(profile, workdir, tests_dir, scope).judge(changes, files)


def report(changes: Sequence[Change], verdict: Verdict, workdir: str | None, source: str,
           profile_key: str | None = None) -> dict[str, Any]:
    """What the trial folder keeps (`sandbox_changes.json`)."""
    ordered = sorted(changes, key=lambda c: c.path)

    def rows(found: Sequence[Finding]) -> list[dict[str, str]]:
        return [{"path": f.path, "kind": f.kind, "rule": f.rule, "detail": f.detail} for f in found]

    return {
        "source": source,
        "image": profile_key,
        "workdir": workdir,
        "suspect": verdict.suspect,
        "findings": rows(verdict.findings),
        "notes": rows(verdict.notes),
        "removed_bytecode": sorted(verdict.remove)[:MAX_LISTED],
        "loader_cache_rebuilt": verdict.rebuild_loader_cache,
        "changes": [f"{c.kind} {c.path}" for c in ordered[:MAX_LISTED]],
        "changes_not_listed": max(0, len(ordered) - MAX_LISTED),
    }
