"""Stale /tmp leftovers of dead runs: vLLM's IPC sockets and short TMPDIRs, dead Ray sessions,
torch inductor caches, aborted base-image builds. Only this user's files, and only when no
live process still uses them."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _mine(path: Path) -> bool:
    try:
        return path.lstat().st_uid == os.getuid()
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
        if not _mine(entry):
            continue
        name = entry.name
        if _UUID.match(name) and stat.S_ISSOCK(entry.lstat().st_mode) and str(entry) not in sockets:
            found.append((entry, "vLLM IPC socket"))
        elif name.startswith("rlkit-vllm-") and entry.is_dir() and str(entry) not in live_text \
                and not any(s.startswith(f"{entry}/") for s in sockets):
            found.append((entry, "vLLM scratch TMPDIR"))
        elif name.startswith("rlkit-base-") and "rlkit images" not in live_text and "base_image" not in live_text:
            found.append((entry, "aborted base-image build"))
        elif name.startswith("torchinductor_") and not _torch_users_alive(live_text):
            found.append((entry, "torch inductor cache"))
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
