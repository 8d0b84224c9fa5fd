"""Python's share of the judgement: which changes on an interpreter's import path can change
what the tests or their runner import.

Each interpreter's import path, in the order Python searches it: the script's folder first
(for the grader: the working dir and its parents, and the PATH folders that hold console
scripts), then its sys.path as the image has it (PYTHONPATH, stdlib, lib-dynload), the user
sites, then the site folders (with the folders their .pth files append). Judged by effect:

* a new module (file, package, sourceless .pyc, extension) that comes earlier than a module
  of the same name the image has: it shadows it (a new name that shadows nothing is a package
  an agent installed). Beside the grader's script or working dir, where the agent's own
  project lives, only modules the test runner imports (measured when the image was probed)
  or an installed package provides count: an agent's `test.py` there shadows nothing a
  grader runs;
* a change or deletion of a file the image has there, or a new file inside one of its
  packages: the interpreter, its stdlib or an installed package changed;
* start-up code: sitecustomize / usercustomize in any form, a .pth in a site folder that runs
  code (`import` lines) or appends a folder whose modules shadow later ones;
* a `pytest11` entry point: flagged when the image's own plugins keep auto-loading on, else
  inert (the tests run with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1) and only noted;
* bytecode caches (`__pycache__/*.pyc`) new or changed under these folders are removed before
  the tests: a cache never changes what correct code does, a forged one would.
"""

from __future__ import annotations

import configparser
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rlkit.sandbox.tamper.profile import ImageProfile, Interpreter

STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
INTERPRETER_CONFIG = ("pyvenv.cfg", "pybuilddir.txt")
ReadText = Callable[[str], Awaitable[str | None]]
ListDir = Callable[[str], Awaitable[list[str] | None]]


@dataclass
class Judged:
    rule: str | None = None          # a finding's rule, or None
    detail: str = ""
    remove: bool = False              # a bytecode cache to delete before the tests
    note: str | None = None           # inert, recorded only


@dataclass
class _Search:
    """One interpreter's import path, with the image's modules in each folder."""

    interpreter: Interpreter
    dirs: list[str]
    site_dirs: set[str]
    modules: list[set[str]] = field(default_factory=list)      # regular modules/packages per folder
    namespaces: list[set[str]] = field(default_factory=list)   # namespace-like folders per folder


def module_name(name: str, suffixes: list[str], is_dir: bool) -> str | None:
    """The module a folder entry defines (`x.py`, `x.pyc`, `x.cpython-311-...so`, `x/`), or None."""
    if is_dir:
        return name if name.isidentifier() and name != "__pycache__" else None
    for suffix in sorted(suffixes, key=len, reverse=True):
        if name.endswith(suffix) and name[:-len(suffix)].isidentifier():
            return name[:-len(suffix)]
    return None


class PythonArea:
    """The import paths of an image's interpreters, and the rules over them."""

    def __init__(self, profile: ImageProfile, workdir: str | None) -> None:
        self.profile = profile
        self.searches = [self._search(i) for i in profile.interpreters]
        self.where: dict[str, list[tuple[_Search, int]]] = {}
        for search in self.searches:
            for position, folder in enumerate(search.dirs):
                self.where.setdefault(folder, []).append((search, position))
        self.script_dirs = {*_with_ancestors(workdir or profile.workdir), *_with_ancestors(profile.workdir),
                            *profile.path_dirs}
        project = posixpath.normpath(workdir or profile.workdir or "/")
        self.project = None if project == "/" else project  # the agent's own tree (on PYTHONPATH, maybe)
        self.config_dirs = {d for i in profile.interpreters
                            for exe_or_command in (i.exe, *i.commands)
                            for d in (posixpath.dirname(exe_or_command),
                                      posixpath.dirname(posixpath.dirname(exe_or_command)))}

    def _search(self, interpreter: Interpreter) -> _Search:
        homes = sorted(set(self.profile.homes.values()))
        user_sites = [posixpath.normpath(posixpath.join(h, interpreter.user_site)) for h in homes
                      if interpreter.user_site]
        dirs = [d for d in interpreter.sys_path if d not in interpreter.site_dirs]
        first_site = len(dirs)
        dirs += [d for d in interpreter.sys_path if d in interpreter.site_dirs]
        dirs[first_site:first_site] = [u for u in user_sites if u not in dirs]
        dirs = list(dict.fromkeys(dirs))
        search = _Search(interpreter, dirs, set(interpreter.site_dirs) | set(user_sites))
        for folder in dirs:
            entries = self.profile.entries.get(folder, {})
            search.modules.append({m for n, k in entries.items() if k != "d"
                                   and (m := module_name(n, interpreter.suffixes, k in "pl")) is not None})
            search.namespaces.append({n for n, k in entries.items() if k == "d" and module_name(n, [], True)})
        return search

    def folders_of(self, path: str) -> list[str]:
        """The import folders `path` lies in (innermost first)."""
        parts = path.split("/")
        found = ["/".join(parts[:n]) or "/" for n in range(len(parts) - 1, 0, -1)]
        return [f for f in found if f in self.where]

    # ---- the rules --------------------------------------------------------------------------
    async def judge(self, path: str, kind: str, read: ReadText, listdir: ListDir) -> Judged:
        name = posixpath.basename(path)
        if (name in INTERPRETER_CONFIG or name.endswith("._pth")) and posixpath.dirname(path) in self.config_dirs \
                and kind != "D":
            return Judged("interpreter_config", "changes where the interpreter finds its modules")
        for folder in self.folders_of(path):
            if self._in_project(folder):
                return await self._beside_grader(folder, path, kind, read)
            for search, position in self.where[folder]:
                judged = await self._in_folder(search, position, folder, path, kind, read, listdir)
                if judged.rule or judged.remove or judged.note:
                    return judged
        parent = posixpath.dirname(path)
        for folder in (parent, posixpath.dirname(parent)):
            if folder in self.script_dirs:
                return await self._beside_grader(folder, path, kind, read)
        return Judged()

    def _in_project(self, folder: str) -> bool:
        """An import folder of the agent's own tree (PYTHONPATH=/app), not a site folder (a user site
        under a working dir of /root stays one)."""
        if not self.project or not (folder == self.project or folder.startswith(self.project + "/")):
            return False
        return not any(folder in search.site_dirs for search in self.searches)

    async def _in_folder(self, search: _Search, position: int, folder: str, path: str, kind: str,
                         read: ReadText, listdir: ListDir) -> Judged:
        parts = path[len(folder.rstrip("/")) + 1:].split("/")
        top, suffixes = parts[0], search.interpreter.suffixes
        if "__pycache__" in parts[:-1] and parts[-1].endswith(".pyc"):
            return Judged(remove=kind != "D")
        image_kind = self.profile.entries.get(folder, {}).get(top)
        edit = kind in ("C", "D") or (kind == "?" and image_kind is not None)
        if len(parts) == 1:
            module = module_name(top, suffixes, "." not in top)
            if top.endswith(".pth") and folder in search.site_dirs:
                if kind == "D":
                    return Judged("interpreter_edit", "a start-up .pth the image has was removed")
                return await self._pth(search, position, folder, path, read, listdir)
            if module in STARTUP_MODULES:
                return Judged("startup_hook", f"{module} runs at every interpreter start")
            if image_kind is not None and edit:
                return Judged("interpreter_edit", "a file of the interpreter or an installed package changed")
            if module is not None and kind != "D" and self._shadows(search, position, module, folder, top):
                return Judged("shadow_module", f"shadows the image's module {module!r}")
            return Judged()
        if top.endswith((".dist-info", ".egg-info")):
            if parts[1] == "entry_points.txt" and kind != "D":
                judged = await self._entry_points(search, path, read)
                if judged.rule or image_kind is None:
                    return judged
            return Judged("interpreter_edit", "an installed distribution's metadata changed") if image_kind else Judged()
        if image_kind == "p" or image_kind == "f":
            return Judged("interpreter_edit" if edit else "package_edit",
                          f"inside the image's package {top!r}")
        if not top.isidentifier() or image_kind == "l":
            return Judged()
        child = parts[1]
        if child.split(".")[0] == "__init__":
            if image_kind == "d":
                return Judged("package_edit", f"turns the namespace {top!r} into a package")
            if top in STARTUP_MODULES:
                return Judged("startup_hook", f"{top} runs at every interpreter start")
            if kind != "D" and self._shadows(search, position, top, folder, top):
                return Judged("shadow_module", f"shadows the image's module {top!r}")
            return Judged()
        if image_kind == "d" and edit and child in self.profile.namespaces.get(f"{folder}/{top}", {}):
            return Judged("interpreter_edit", f"a file of the namespace package {top!r} changed")
        child_module = module_name(child, suffixes, len(parts) > 2)
        if kind != "D" and child_module and self._namespace_shadows(search, folder, top, child_module):
            return Judged("shadow_module", f"shadows the image's module {top}.{child_module}")
        return Judged()

    def _shadows(self, search: _Search, position: int, module: str, folder: str, entry: str,
                 inserted: bool = False) -> bool:
        """A new `module` in `folder` is found before one the image has (or beside it, in another form).

        `folder` is the import folder at `position`, or (`inserted`) one a .pth puts right after it."""
        if module in search.interpreter.builtins:
            return False
        earlier = range(position + 1 if inserted else position)
        if any(module in search.modules[j] for j in earlier):
            return False  # an earlier folder's module wins over the new one
        entries = self.profile.entries.get(folder, {})
        in_same = any(module_name(n, search.interpreter.suffixes, k in "dpl") == module
                      for n, k in entries.items() if n != entry)
        later = range(position + 1, len(search.dirs))
        return in_same or any(module in search.modules[j] or module in search.namespaces[j] for j in later)

    def _namespace_shadows(self, search: _Search, folder: str, namespace: str, child: str) -> bool:
        for other in search.dirs:
            if other != folder and namespace in self.profile.entries.get(other, {}):
                children = self.profile.namespaces.get(f"{other}/{namespace}", {})
                # a module or package of the namespace (a folder without __init__ there is data: share/doc)
                if any(k != "d" and module_name(n, search.interpreter.suffixes, k in "pl") == child
                       for n, k in children.items()):
                    return True
        return False

    async def _pth(self, search: _Search, position: int, folder: str, path: str, read: ReadText,
                   listdir: ListDir) -> Judged:
        text = await read(path)
        if text is None:
            return Judged("pth_code", "a .pth that cannot be read as text")
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                return Judged("pth_code", "a .pth line that runs code at every interpreter start")
            added = posixpath.normpath(posixpath.join(folder, line))
            names = await listdir(added)
            for name in names or []:
                module = module_name(name, search.interpreter.suffixes, "." not in name)
                if module in STARTUP_MODULES:
                    return Judged("pth_shadow", f"appends {added}, which holds {name}")
                if module is not None and self._shadows(search, position, module, added, name, inserted=True):
                    return Judged("pth_shadow", f"appends {added}, whose {name} shadows the image's {module!r}")
        return Judged()

    async def _entry_points(self, search: _Search, path: str, read: ReadText) -> Judged:
        text = await read(path)
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
        try:
            parser.read_string(text or "")
        except configparser.Error:
            return Judged("pytest_plugin", "an entry_points.txt that cannot be parsed") if self._autoload() else Judged()
        if not parser.has_section("pytest11") or not parser.items("pytest11"):
            return Judged()
        plugins = ", ".join(f"{k} = {v}" for k, v in parser.items("pytest11"))
        if self._autoload():
            return Judged("pytest_plugin", f"auto-loads into pytest: {plugins}")
        return Judged(note=f"pytest plugin that cannot load (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1): {plugins}")

    def _autoload(self) -> bool:
        return self.profile.image_pytest_plugins()

    async def _beside_grader(self, folder: str, path: str, kind: str, read: ReadText) -> Judged:
        """A new module at the top of `folder`: the grader's script or working dir (found before every
        other folder), or an import folder inside the agent's own project. Flagged when named like a
        module the test runner loads or an installed package provides, or (on the import path) as
        start-up code; the agent's own modules there are its work."""
        parts = path[len(folder.rstrip("/")) + 1:].split("/")
        if kind == "D" or len(parts) > 2:
            return Judged()
        entry = parts[0]
        if len(parts) == 2:
            if entry.endswith((".dist-info", ".egg-info")) and parts[1] == "entry_points.txt" and self.searches:
                return await self._entry_points(self.searches[0], path, read)
            if parts[1].split(".")[0] != "__init__":
                return Judged()
        if self.profile.entries.get(folder, {}).get(entry) is not None and kind != "A":
            return Judged()  # the image's own file there
        for search in self.searches:
            module = module_name(entry, search.interpreter.suffixes, len(parts) == 2 or "." not in entry)
            if module is None or module in search.interpreter.builtins:
                continue
            if module in STARTUP_MODULES and folder in self.where:
                return Judged("startup_hook", f"{module} runs at every interpreter start")
            if module in search.interpreter.runner_modules or module in self._installed(search):
                return Judged("shadow_module", f"beside the grader's script or working dir, shadows {module!r}")
        return Judged()

    def _installed(self, search: _Search) -> set[str]:
        """Modules of the image's installed packages (every folder but the stdlib's)."""
        stdlib = set(search.interpreter.stdlib) | {f"{d}/lib-dynload" for d in search.interpreter.stdlib}
        return {m for folder, mods, spaces in zip(search.dirs, search.modules, search.namespaces, strict=True)
                if folder not in stdlib and not folder.endswith(".zip") for m in mods | spaces}


def _with_ancestors(path: str) -> list[str]:
    path = posixpath.normpath(path or "/")
    out = [path]
    while path != "/":
        path = posixpath.dirname(path)
        out.append(path)
    return out
