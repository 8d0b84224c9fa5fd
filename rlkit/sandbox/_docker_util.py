"""Small Engine API helpers of the docker backend (mounts, image and path stats)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from rlkit.errors import SandboxError

# Go os.FileMode type bits, as the Engine API reports them in path stats.
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27
GO_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


def docker_mount(mount: dict) -> Any:
    """A docker `Mount` from one of harbor's ServiceVolumeConfig dicts (bind or volume)."""
    import docker.types

    kind, source, target = mount["type"], str(mount["source"]), str(mount["target"])
    read_only = bool(mount.get("read_only"))
    if kind == "bind":
        host = Path(source)
        if (mount.get("bind") or {}).get("create_host_path", True) is not False:
            host.mkdir(parents=True, exist_ok=True)
        if not read_only:
            host.chmod(0o777)  # an agent running as a non-root user writes its logs here
        return docker.types.Mount(target, str(host.resolve()), type="bind", read_only=read_only)
    if kind == "volume":
        return docker.types.Mount(target, source, type="volume", read_only=read_only)
    raise SandboxError(f"mount type {kind!r} is not supported by the docker backend", mount=str(mount))


def stat_mode(api: Any, container: str, path: str) -> int | None:
    """Go FileMode bits of `path` in the container (HEAD on the archive endpoint), None if absent."""
    response = api.head(api._url("/containers/{0}/archive", container), params={"path": path})
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return int(json.loads(base64.b64decode(response.headers["X-Docker-Container-Path-Stat"]))["mode"])


def inspect_image(api: Any, ref: str) -> dict | None:
    import docker.errors

    try:
        return api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None


def daemon_is_local() -> bool:
    """dockerd runs on this host (unix socket), so host paths can be bind-mounted."""
    host = os.environ.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


def is_other_user(user: str | int | None) -> bool:
    """A user whose permissions may differ from root's (the Engine API stats as root)."""
    return user is not None and str(user) not in {"root", "0"}


def text_or_none(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")
