"""Where the verifier's own pytest command reads its configuration, from the task's test.sh.

pytest reads an ini file (pytest.ini, .pytest.ini, tox.ini, setup.cfg, pyproject.toml) from the
folders above the paths it is given (the working dir when it is given none), unless `-c FILE`
names one; it loads conftest.py from the folders above those paths, unless `--noconftest`.
A config file the command cannot read changes nothing and is not a finding: `/app/pytest.ini`
beside `pytest -c /dev/null /tests/test_x.py`, or beside `cd /app; pytest /tests/test_x.py`.

Read off every pytest command line of test.sh (simple `cd DIR` lines followed); anything it
cannot read for sure (no pytest command, a relative `cd`, `PYTEST_ADDOPTS`, a variable in a
path) leaves the scope unknown: the judgement then flags config files above the tests and in
the working dir, as before.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass

# pytest options that take a separate value (so the next word is not a path)
_VALUED = frozenset({
    "-c", "--config-file", "-p", "-k", "-m", "-o", "--override-ini", "--rootdir", "--confcutdir", "--basetemp",
    "-W", "--pythonwarnings", "--junit-xml", "--junitxml", "--junit-prefix", "--maxfail", "--tb", "--deselect",
    "--ignore", "--ignore-glob", "--durations", "--durations-min", "--timeout", "--ctrf", "--cov",
    "--cov-report", "--log-level", "--log-file", "--log-cli-level", "--import-mode", "--capture", "-n",
    "--dist", "--json-report-file", "--html", "--report-log", "--color", "--code-highlight",
    "--reruns", "--count", "-r"})
_SHELL_WORDS = frozenset({";", "&&", "||", "|", "&", "(", ")", ">", ">>", "<", "2>", "2>&1"})
_PYTEST = re.compile(r"(^|/)(py\.test|pytest)$")


@dataclass(frozen=True)
class ConfigScope:
    """Folders whose pytest config files the verifier's pytest reads (None: unknown, judge broadly)."""

    ini_dirs: frozenset[str] | None = None
    conftest_dirs: frozenset[str] | None = None

    @property
    def known(self) -> bool:
        return self.ini_dirs is not None and self.conftest_dirs is not None


UNKNOWN = ConfigScope()


def _ancestors(path: str) -> set[str]:
    out = {path}
    while path != "/":
        path = posixpath.dirname(path)
        out.add(path)
    return out


def _pytest_args(words: list[str]) -> list[str] | None:
    """The words after `pytest` / `python -m pytest` in one simple command, or None."""
    for i, word in enumerate(words):
        if _PYTEST.search(word):
            return words[i + 1:]
        if word == "-m" and i + 1 < len(words) and words[i + 1] == "pytest":
            return words[i + 2:]
    return None


def config_scope(test_sh: str, workdir: str | None) -> ConfigScope:
    """Where the pytest commands of `test_sh`, started in `workdir`, read config files."""
    cwd = posixpath.normpath(workdir or "/")
    ini: set[str] = set()
    conftest: set[str] = set()
    found = False
    for line in test_sh.replace("\\\n", " ").splitlines():
        if "PYTEST_ADDOPTS" in line or "PYTEST_PLUGINS" in line:
            return UNKNOWN
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words = list(lexer)
        except ValueError:
            if "pytest" in line or "py.test" in line:
                return UNKNOWN
            continue
        commands: list[list[str]] = [[]]
        for word in words:
            if word in _SHELL_WORDS or set(word) <= set(";&|()<>"):
                commands.append([])
            else:
                commands[-1].append(word)
        for command in filter(None, commands):
            if command[0] == "cd":
                if len(command) != 2 or not command[1].startswith("/") or "$" in command[1]:
                    return UNKNOWN
                cwd = posixpath.normpath(command[1])
                continue
            args = _pytest_args(command)
            if args is None:
                continue
            found = True
            scope = _one_command(args, cwd)
            if not scope.known:
                return UNKNOWN
            ini |= scope.ini_dirs or set()
            conftest |= scope.conftest_dirs or set()
    return ConfigScope(frozenset(ini), frozenset(conftest)) if found else UNKNOWN


def _one_command(args: list[str], cwd: str) -> ConfigScope:
    config_file = no_conftest = False
    paths: list[str] = []
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if "$" in word or "`" in word or "*" in word:
            return UNKNOWN
        name = word.split("=", 1)[0]
        if name in ("-c", "--config-file") or (word.startswith("-c") and len(word) > 2 and not word.startswith("--")):
            config_file = True
        if word == "--noconftest":
            no_conftest = True
        if word in _VALUED:
            skip = True
        elif word.startswith("-"):
            continue
        else:
            paths.append(posixpath.normpath(posixpath.join(cwd, word.split("::", 1)[0])))
    # a test file's folder; a folder as given (its own conftest files lie in it and are the tests')
    anchors = [p if not p.endswith(".py") else posixpath.dirname(p) for p in paths] or [cwd]
    common = posixpath.commonpath(anchors) if anchors else cwd
    ini_dirs = frozenset() if config_file else frozenset(_ancestors(common))
    conftest_dirs = frozenset() if no_conftest else frozenset(d for a in anchors for d in _ancestors(a))
    return ConfigScope(ini_dirs, conftest_dirs)
