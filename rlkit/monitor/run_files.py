"""Reading a run's files as the monitor does: one plain name per path level, resolved inside the run's
folders (`safe_child`), and JSON and text read bounded through rlkit.config.files (None when unreadable).
What trials.py (the step and trial tables) and trajectory.py (one trial's turns) both read with."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlkit.config import files
from rlkit.errors import UserError

NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
TEXT_LIMIT = 200_000
JSON_LIMIT = 256 * 2**20  # a long trial's trajectory.json


class PathRefused(UserError):
    """A requested name that is not one plain path component inside the run's folders."""


def safe_child(root: Path, *names: str) -> Path:
    """root/names... only when every name is one plain component and the result stays under root."""
    for name in names:
        if not NAME_RE.match(name) or name in {".", ".."}:
            raise PathRefused(f"refused path component {name!r}", fix="name a step or trial folder")
    try:  # a symlink loop, a name too long: refused, never a RuntimeError / OSError (a 500)
        base = root.resolve()
        path = base.joinpath(*names).resolve()
    except (OSError, RuntimeError, ValueError):
        raise PathRefused(f"refused path {'/'.join(names)!r}: it cannot be resolved (a symlink loop?)",
                          fix="name a trial folder") from None
    if path != base and base not in path.parents:
        raise PathRefused(f"refused path {'/'.join(names)!r}: outside the run's folders", fix="name a trial folder")
    return path


def read_json(path: Path, root: Path) -> Any:
    """A run's JSON file (rlkit.config.files: a regular file under `root`, bounded); None when it cannot be read."""
    try:
        return files.read_json(path, max_bytes=JSON_LIMIT, root=root)
    except files.FileReadError:
        return None


def read_text(path: Path, root: Path, limit: int = TEXT_LIMIT) -> str | None:
    try:
        with files.open_regular(path, root=root) as f:
            data = f.read(limit + 1)
    except (OSError, files.FileReadError):
        return None
    text = data[:limit].decode("utf-8", "replace")
    return text + "\n… (cut)" if len(data) > limit else text
