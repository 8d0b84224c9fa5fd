"""What an image looks like to its verifier, asked once per image and cached.

A sandbox runs the probe (`_probe.py`) right after it starts, before any agent: the image's
PATH and the real folders on it, the absolute paths of the tools the verifier runs, every
Python interpreter on PATH with its own import path (sys.path, site folders, user site,
pytest plugins the image installed), the library folders the loader searches, and the
symlinks those paths run through. The answer is kept per image id, in memory and under
`$RLKIT_CACHE_DIR/image-profiles/` (default ~/.cache/rlkit), so each image is probed once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import posixpath
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlkit.config.paths import machine_cache_dir
from rlkit.sandbox.tamper._probe import PYTHON_PART, SCAN_PART, SHELL_PART, probe_command

EntryKind = Literal["f", "d", "p", "l"]
PROBE_VERSION = hashlib.sha256((SHELL_PART + PYTHON_PART + SCAN_PART).encode()).hexdigest()[:12]
FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_log = logging.getLogger(__name__)
_MEMORY: dict[str, ImageProfile] = {}
_PROBING: dict[tuple[int, str], asyncio.Lock] = {}


class Interpreter(BaseModel):
    """One Python interpreter on the image's PATH, as it describes itself."""

    model_config = ConfigDict(extra="forbid")

    commands: list[str] = Field(description="PATH entries that run it (/usr/bin/python3, ...)")
    exe: str = Field(description="real path of the binary")
    prefix: str = ""
    version: str = ""
    cache_tag: str = ""
    sys_path: list[str] = Field(default_factory=list, description="real paths, in order, without the script dir")
    site_dirs: list[str] = Field(default_factory=list, description="folders whose .pth files run at start-up")
    user_site: str = Field("", description="the user site relative to a home (.local/lib/pythonX.Y/site-packages)")
    stdlib: list[str] = Field(default_factory=list)
    builtins: list[str] = Field(default_factory=list)
    suffixes: list[str] = Field(default_factory=lambda: [".py", ".pyc", ".so"])
    pytest_plugins: list[str] = Field(default_factory=list, description="pytest11 entry points of the image")
    runner_modules: list[str] = Field(default_factory=list,
                                      description="top-level modules loaded once pytest has run a test")


class ImageProfile(BaseModel):
    """An image's verifier-relevant facts (from `_probe`); paths are real paths in the image."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="the image id it was probed from")
    probe_version: str = PROBE_VERSION
    workdir: str = "/"
    path: str = Field(FIXED_PATH, description="PATH of a plain exec in the image")
    path_dirs: list[str] = Field(default_factory=list, description="real folders on PATH, in order, once each")
    tools: dict[str, str] = Field(default_factory=dict, description="tool -> absolute path on PATH")
    homes: dict[str, str] = Field(default_factory=dict, description="user (name and uid) -> home, from /etc/passwd")
    lib_dirs: list[str] = Field(default_factory=list, description="real folders the loader searches")
    interpreters: list[Interpreter] = Field(default_factory=list)
    entries: dict[str, dict[str, EntryKind]] = Field(default_factory=dict, description="folder -> name -> kind")
    namespaces: dict[str, dict[str, EntryKind]] = Field(default_factory=dict,
                                                        description="folder/namespace -> child -> kind")
    links: dict[str, str] = Field(default_factory=dict, description="symlink -> target, on the paths above")

    def tool(self, name: str) -> str:
        """Absolute path of a tool the verifier runs (the bare name where the image lacks it)."""
        return self.tools.get(name, name)

    def home_of(self, user: str | int | None) -> str:
        if user is None or str(user) in {"", "0", "root"}:
            return self.homes.get("root", "/root")
        return self.homes.get(str(user), "/")

    def image_pytest_plugins(self) -> bool:
        """The image itself installed pytest plugins (so their auto-loading stays on)."""
        return any(i.pytest_plugins for i in self.interpreters)

    def grading_env(self, user: str | int | None = None) -> dict[str, str]:
        """The fixed environment the tests run in (on top of the container's configured one)."""
        env = {"PATH": self.path or FIXED_PATH, "HOME": self.home_of(user), "PYTHONNOUSERSITE": "1"}
        if not self.image_pytest_plugins():
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        return env


def parse_probe(stdout: str, key: str) -> ImageProfile:
    """An ImageProfile from the probe's records (see `_probe`)."""
    profile = ImageProfile(key=key)
    interpreters: dict[tuple[str, str], Interpreter] = {}
    commands: dict[str, list[str]] = {}
    users: list[tuple[str, int, str]] = []
    for line in stdout.splitlines():
        tag, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if tag == "W" and fields[0]:
            profile.workdir = posixpath.normpath(fields[0])
        elif tag == "V":
            profile.path = rest
        elif tag == "D" and len(fields) == 2 and fields[1] not in profile.path_dirs:
            profile.path_dirs.append(fields[1])
        elif tag == "T" and len(fields) == 2:
            profile.tools[fields[0]] = fields[1]
        elif tag == "U" and len(fields) == 3 and fields[1].isdigit():
            users.append((fields[0], int(fields[1]), fields[2]))
        elif tag == "B" and fields[0] not in profile.lib_dirs:
            profile.lib_dirs.append(fields[0])
        elif tag == "N" and len(fields) == 2:
            commands.setdefault(fields[1], []).append(fields[0])
        elif tag == "I" and len(fields) == 2:
            _add_interpreter(interpreters, fields[0], fields[1])
        elif tag == "E" and len(fields) == 3 and fields[2] in ("f", "d", "p", "l"):
            profile.entries.setdefault(fields[0], {})[fields[1]] = fields[2]  # type: ignore[assignment]
        elif tag == "C" and len(fields) == 3 and fields[2] in ("f", "d", "p", "l"):
            profile.namespaces.setdefault(fields[0], {})[fields[1]] = fields[2]  # type: ignore[assignment]
        elif tag == "L" and len(fields) == 2:
            profile.links[posixpath.normpath(fields[0])] = fields[1]
    for interpreter in interpreters.values():
        interpreter.commands = sorted({*interpreter.commands, *commands.get(interpreter.exe, [])})
    profile.interpreters = list(interpreters.values())
    for name, uid, home in users:
        profile.homes.setdefault(name, home)
        profile.homes.setdefault(str(uid), home)
    return profile


def _add_interpreter(found: dict[tuple[str, str], Interpreter], command: str, facts: str) -> None:
    try:
        data: dict[str, Any] = json.loads(facts)
    except ValueError:
        return
    keep = set(Interpreter.model_fields) - {"commands"}
    interpreter = Interpreter(commands=[command], **{k: v for k, v in data.items() if k in keep})
    key = (posixpath.dirname(command), interpreter.exe)
    if key in found:
        found[key].commands.append(command)
    else:
        found[key] = interpreter


def cache_dir() -> Path:
    return machine_cache_dir() / "image-profiles"


def cached(key: str) -> ImageProfile | None:
    """The profile of image `key`, from memory or the disk cache."""
    if not key:
        return None
    profile = _MEMORY.get(key)
    if profile is not None:
        return profile
    path = cache_dir() / f"{_file_name(key)}.json"
    try:
        profile = ImageProfile.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    if profile.probe_version != PROBE_VERSION or profile.key != key:
        return None
    _MEMORY[key] = profile
    return profile


def remember(profile: ImageProfile) -> None:
    _MEMORY[profile.key] = profile
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as tmp:
            tmp.write(profile.model_dump_json())
        os.replace(tmp.name, folder / f"{_file_name(profile.key)}.json")
    except OSError as exc:  # an unwritable cache costs a probe per process, nothing else
        _log.debug("cannot cache the image profile: %s", exc)


def _file_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


async def ensure_profile(environment: Any, key: str) -> ImageProfile | None:
    """The profile of the image `environment` runs (id `key`): cached, else probed in it now.

    Call it before anything else runs in the sandbox: the probe trusts what it finds. Sandboxes
    of one image that start together on one event loop probe it once."""
    profile = cached(key)
    if profile is not None:
        return profile
    lock = _PROBING.setdefault((id(asyncio.get_running_loop()), key), asyncio.Lock())
    async with lock:
        return cached(key) or await _probe(environment, key)


async def _probe(environment: Any, key: str) -> ImageProfile | None:
    result = await environment.exec(probe_command(), user="root", timeout_sec=300)
    if result.return_code != 0 or not result.stdout:
        _log.warning("probing image %s failed (%s): no tamper check for its trials", key,
                     (result.stderr or "")[-300:])
        return None
    profile = parse_probe(result.stdout, key)
    remember(profile)
    return profile
