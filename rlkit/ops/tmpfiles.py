"""Stale leftovers of dead runs on disk: vLLM's IPC sockets, short TMPDIRs and scratch folders
(`.rlkit/vllm_scratch/<exp>_<port>`, ~150 MB each), dead Ray sessions and a dangling
`session_latest`, torch inductor caches, aborted base-image builds. Only this user's files, and
only when no live process still uses them.

Two ways to find them:
  stale_tmp()            every leftover of this user on the machine (`rlkit cleanup` with no project)
  scoped(candidates)     only the paths a dead run is known to have made: listed by its stale lock
                         (`leftovers`) or used by its orphaned processes (`process_leftovers`); a path
                         counts only when it has the shape of one of rlkit's leftovers
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

MIN_AGE_S = 30.0  # younger leftovers may belong to a start in progress (a Ray session before its gcs_server)
VLLM_TMP_MIN_AGE_S = 5.0
REPO_SCRATCH = Path(__file__).resolve().parents[2] / ".rlkit" / "vllm_scratch"  # VllmServer's default scratch
SCRATCH_DIR_NAME = "vllm_scratch"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_RAY_SESSION = re.compile(r"^session_2[0-9_-]+$")
_RAY_SESSION_IN_TEXT = re.compile(r"(/\S*?/session_2[0-9_-]+)")


def _mine(path: Path, min_age_s: float = MIN_AGE_S) -> bool:
    """This user's, and old enough that no start in progress is making it."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and time.time() - info.st_mtime > min_age_s


def _stale_socket(path: Path, sockets: set[str], min_age_s: float = MIN_AGE_S) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode) and str(path) not in sockets and _mine(path, min_age_s)
    except OSError:
        return False


def _live_usage() -> tuple[set[str], str]:
    """(unix socket paths bound by live processes, every live process's command line, TMPDIR and vLLM
    cache root joined)."""
    import psutil

    sockets: set[str] = set()
    try:
        sockets = {c.laddr for c in psutil.net_connections(kind="unix") if isinstance(c.laddr, str) and c.laddr}
    except (psutil.Error, OSError):
        pass
    text = []
    for proc in psutil.process_iter(["cmdline"]):
        text.append(" ".join(proc.info["cmdline"] or ()))
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        text += [env.get("TMPDIR", ""), env.get("VLLM_CACHE_ROOT", "")]
    return sockets, "\n".join(text)


def leftover_kind(path: Path) -> str | None:
    """What `path` is when it has the shape of one of rlkit's leftovers; None for anything else (a lock
    may list only these, so a damaged lock can never point cleanup at another folder)."""
    name = path.name
    if _RAY_SESSION.match(name) and path.parent.name == "ray":
        return "Ray session of a dead Ray"
    if path.parent.name == SCRATCH_DIR_NAME and path.parent.parent.name == ".rlkit" or _scratch_layout(path):
        return "vLLM scratch folder"
    if name.startswith("rlkit-vllm-") and path.parent == Path(tempfile.gettempdir()):
        return "vLLM scratch TMPDIR"
    return None


def _scratch_layout(path: Path) -> bool:
    """A folder holding only what VllmServer puts in its scratch folder (cache/, inductor/, tmp/)."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError:
        return False
    return bool(names) and names <= {"cache", "inductor", "tmp"} and not path.is_symlink()


def _in_use(path: Path, sockets: set[str], live_text: str) -> bool:
    text = str(path)
    return text in live_text or any(s.startswith(f"{text}/") for s in sockets)


def stale_tmp(tmp: Path | None = None, ray_tmp: Path | None = None,
              scratch: Path | None = None) -> list[tuple[Path, str]]:
    """(path, what) of this user's leftovers nothing live uses."""
    tmp = tmp or Path(tempfile.gettempdir())
    ray_tmp = ray_tmp or Path(os.environ.get("RAY_TMPDIR", tmp / "ray"))
    scratch = scratch or REPO_SCRATCH
    sockets, live_text = _live_usage()
    found: list[tuple[Path, str]] = []
    for entry in sorted(tmp.iterdir()) if tmp.is_dir() else ():
        # a vLLM TMPDIR is in use once its server starts (its environment names it): only the moment
        # between mkdtemp and the server's start needs the age guard
        if not _mine(entry, VLLM_TMP_MIN_AGE_S if entry.name.startswith("rlkit-vllm-") else MIN_AGE_S):
            continue
        name = entry.name
        if _UUID.match(name) and _stale_socket(entry, sockets):
            found.append((entry, "vLLM IPC socket"))
        elif name.startswith("rlkit-vllm-") and entry.is_dir() and not _in_use(entry, sockets, live_text):
            found.append((entry, "vLLM scratch TMPDIR"))
        elif name.startswith("rlkit-base-") and "rlkit images" not in live_text and "base_image" not in live_text:
            found.append((entry, "aborted base-image build"))
        elif name.startswith("torchinductor_") and not _torch_users_alive(live_text):
            found.append((entry, "torch inductor cache"))
    for folder in sorted(scratch.iterdir()) if scratch.is_dir() else ():
        if folder.is_dir() and not folder.is_symlink() and _mine(folder) and not _in_use(folder, sockets, live_text):
            found.append((folder, "vLLM scratch folder"))
        elif (folder / "tmp").is_dir():  # a live server's folder: only its sockets that nothing binds
            found += [(sock, "vLLM IPC socket") for sock in sorted((folder / "tmp").iterdir())
                      if _UUID.match(sock.name) and _stale_socket(sock, sockets)]
    sessions = sorted(ray_tmp.glob("session_2*")) if ray_tmp.is_dir() else []
    for session in sessions:
        if _mine(session) and session.is_dir() and not session.is_symlink() and session.name not in live_text:
            found.append((session, "Ray session of a dead Ray"))
    found += _dangling_latest(ray_tmp, {p for p, _ in found})
    return found


def _dangling_latest(ray_tmp: Path, going: set[Path]) -> list[tuple[Path, str]]:
    """`session_latest` when it points at nothing, or at a session being removed."""
    latest = ray_tmp / "session_latest"
    if not latest.is_symlink() or latest.lstat().st_uid != os.getuid():
        return []
    target = Path(os.path.join(ray_tmp, os.readlink(latest)))
    return [(latest, "Ray's session_latest link")] if not target.exists() or target in going else []


def scoped(candidates: Iterable[Path]) -> list[tuple[Path, str]]:
    """(path, what) of the given paths that are rlkit leftovers of this user that nothing live uses.
    No age guard: their owner is known to be dead, so no start is in progress."""
    sockets, live_text = _live_usage()
    found: list[tuple[Path, str]] = []
    for path in dict.fromkeys(Path(p) for p in candidates):
        what = leftover_kind(path)
        if what is None or not _mine(path, 0.0) or _in_use(path, sockets, live_text):
            continue
        if path.name.startswith("session_2") and path.name in live_text:
            continue
        found.append((path, what))
    ray_tmps = {p.parent for p, _ in found if p.name.startswith("session_2")}
    for ray_tmp in sorted(ray_tmps):
        found += _dangling_latest(ray_tmp, {p for p, _ in found})
    return found


def process_leftovers(cmdline: str, environ: dict[str, str]) -> list[Path]:
    """Folders a process of a run writes to: its Ray session (named on Ray's command lines), its vLLM
    scratch folder (the parent of VLLM_CACHE_ROOT) and a short vLLM TMPDIR."""
    out = [Path(m) for m in _RAY_SESSION_IN_TEXT.findall(cmdline)]
    cache = environ.get("VLLM_CACHE_ROOT")
    if cache:
        out.append(Path(cache).parent)
    tmpdir = environ.get("TMPDIR", "")
    if Path(tmpdir).name.startswith("rlkit-vllm-"):
        out.append(Path(tmpdir))
    return [p for p in out if leftover_kind(p)]


def _torch_users_alive(live_text: str) -> bool:
    """A vLLM, Ray worker or trainer still runs: it may be compiling into the cache."""
    return any(m in live_text for m in ("vllm", "ray/", "rlkit train", "torch"))


def remove(path: Path) -> str | None:
    """None when removed (or already gone), else why not."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return str(exc)
    return None
