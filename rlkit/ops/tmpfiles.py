"""Stale /tmp leftovers of dead runs: vLLM's IPC sockets and short TMPDIRs, dead Ray sessions,
torch inductor caches, aborted base-image builds. Only this user's files, and only when no
live process still uses them."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

MIN_AGE_S = 30.0  # younger leftovers may belong to a start in progress (a Ray session before its gcs_server)
VLLM_TMP_MIN_AGE_S = 5.0
REPO_SCRATCH = Path(__file__).resolve().parents[2] / ".rlkit" / "vllm_scratch"  # VllmServer's default scratch
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _mine(path: Path, min_age_s: float = MIN_AGE_S) -> bool:
    """This user's, and old enough that no start in progress is making it."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and time.time() - info.st_mtime > min_age_s


def _stale_socket(path: Path, sockets: set[str]) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode) and str(path) not in sockets and _mine(path)
    except OSError:
        return False


def _live_usage() -> tuple[set[str], str]:
    """(unix socket paths bound by live processes, every live process's command line and TMPDIR joined)."""
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
            text.append(proc.environ().get("TMPDIR", ""))
        except psutil.Error:
            pass
    return sockets, "\n".join(text)


def stale_tmp(tmp: Path | None = None, ray_tmp: Path | None = None) -> list[tuple[Path, str]]:
    """(path, what) of leftovers nothing live uses."""
    tmp = tmp or Path(tempfile.gettempdir())
    ray_tmp = ray_tmp or Path(os.environ.get("RAY_TMPDIR", tmp / "ray"))
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
        elif name.startswith("rlkit-vllm-") and entry.is_dir() and str(entry) not in live_text \
                and not any(s.startswith(f"{entry}/") for s in sockets):
            found.append((entry, "vLLM scratch TMPDIR"))
        elif name.startswith("rlkit-base-") and "rlkit images" not in live_text and "base_image" not in live_text:
            found.append((entry, "aborted base-image build"))
        elif name.startswith("torchinductor_") and not _torch_users_alive(live_text):
            found.append((entry, "torch inductor cache"))
    for scratch_tmp in sorted(REPO_SCRATCH.glob("*/tmp")) if REPO_SCRATCH.is_dir() else ():
        found += [(sock, "vLLM IPC socket") for sock in sorted(scratch_tmp.iterdir())
                  if _UUID.match(sock.name) and _stale_socket(sock, sockets)]
    for session in sorted(ray_tmp.glob("session_2*")) if ray_tmp.is_dir() else ():
        if _mine(session) and session.is_dir() and not session.is_symlink() and session.name not in live_text:
            found.append((session, "Ray session of a dead Ray"))
    return found


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
