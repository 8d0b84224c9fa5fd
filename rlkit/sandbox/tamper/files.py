"""Reading a sandbox's files for the judgement, without running anything the agent could have replaced.

* `HostRootReader`: the container's merged overlay on this host, read by rlkit itself.
  Symlinks are followed inside the container's root (never out of it, never into a FIFO or
  device): the agent chose them.
* `ArchiveReader`: the Engine API's archive endpoint (dockerd reads the files, not the container).
* `ExecReader`: bash builtins in the sandbox (k8s), through the image's own bash by absolute path.
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
import stat
import tarfile
from typing import Any, Protocol

MAX_READ = 64 * 1024
MAX_LISTED = 20_000
MAX_HOPS = 40


class SandboxFiles(Protocol):
    async def read_text(self, path: str) -> str | None: ...

    async def list_dir(self, path: str) -> list[str] | None: ...


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


class HostRootReader:
    """Files of a container whose root filesystem is mounted at `root` on this host."""

    def __init__(self, root: str) -> None:
        self.root = root

    def resolve(self, path: str) -> str | None:
        """The host path of `path` with every symlink resolved inside the root; None if missing."""
        pending, done, hops = _split(path), [], 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            host = os.path.join(self.root, *done, part)
            try:
                info = os.lstat(host)
            except OSError:
                return None
            if stat.S_ISLNK(info.st_mode):
                hops += 1
                if hops > MAX_HOPS:
                    return None
                target = os.readlink(host)
                if target.startswith("/"):
                    done = []
                pending = _split(target) + pending
                continue
            if pending and not stat.S_ISDIR(info.st_mode):
                return None
            done.append(part)
        return os.path.join(self.root, *done)

    async def read_text(self, path: str) -> str | None:
        host = self.resolve(path)
        if host is None:
            return None
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, MAX_READ).decode("utf-8", errors="replace")
        finally:
            os.close(fd)

    async def list_dir(self, path: str) -> list[str] | None:
        host = self.resolve(path)
        if host is None or not os.path.isdir(host) or os.path.islink(host):
            return None
        try:
            with os.scandir(host) as it:
                return [entry.name for _, entry in zip(range(MAX_LISTED), it, strict=False)]
        except OSError:
            return None


class ArchiveReader:
    """Files of a container read through the Engine API (`GET /containers/{id}/archive`)."""

    def __init__(self, api: Any, container: str) -> None:
        self.api, self.container = api, container

    def _members(self, path: str) -> tarfile.TarFile | None:
        import docker.errors

        try:
            stream, _stat = self.api.get_archive(self.container, path)
            data = b"".join(stream)
        except docker.errors.APIError:
            return None
        return tarfile.open(fileobj=io.BytesIO(data))

    def _read(self, path: str) -> str | None:
        for _ in range(MAX_HOPS):
            tar = self._members(path)
            if tar is None:
                return None
            with tar:
                first = tar.next()
                if first is None:
                    return None
                if first.issym():
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), first.linkname))
                    continue
                if not first.isfile():
                    return None
                handle = tar.extractfile(first)
                return handle.read(MAX_READ).decode("utf-8", errors="replace") if handle else None
        return None

    async def read_text(self, path: str) -> str | None:
        from rlkit.sandbox.pool import run_blocking

        return await run_blocking(self._read, path)

    def _list(self, path: str) -> list[str] | None:
        tar = self._members(path.rstrip("/") + "/.")
        if tar is None:
            return None
        with tar:
            names = {n.split("/")[1] for n in tar.getnames() if n.count("/") >= 1 and n.split("/")[1]}
        return sorted(names)[:MAX_LISTED]

    async def list_dir(self, path: str) -> list[str] | None:
        from rlkit.sandbox.pool import run_blocking

        return await run_blocking(self._list, path)


class ExecReader:
    """Files read by bash builtins in the sandbox (`shell`: the image's bash, by absolute path)."""

    def __init__(self, environment: Any, shell: str) -> None:
        self.environment, self.shell = environment, shell

    async def _run(self, script: str) -> str | None:
        result = await self.environment.exec(script, user="root", timeout_sec=60, shell=self.shell)
        return result.stdout if result.return_code == 0 else None

    async def read_text(self, path: str) -> str | None:
        quoted = shlex.quote(path)
        return await self._run(f"[ -f {quoted} ] || exit 1; n=0; while IFS= read -r l || [ -n \"$l\" ]; do "
                               f"printf '%s\\n' \"$l\"; n=$((n + 1)); [ $n -ge 2000 ] && break; done < {quoted}")

    async def list_dir(self, path: str) -> list[str] | None:
        quoted = shlex.quote(path.rstrip("/"))
        out = await self._run(f"[ -d {quoted} ] || exit 1; for e in {quoted}/* {quoted}/.[!.]* {quoted}/..?*; do "
                              "{ [ -e \"$e\" ] || [ -L \"$e\" ]; } && printf '%s\\n' \"${e##*/}\"; done; true")
        return None if out is None else out.splitlines()[:MAX_LISTED]
