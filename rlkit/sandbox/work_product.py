"""An agent's work product, carried from its sandbox into a clean one.

What is carried is data, never a way into the rest of the filesystem: regular files and
folders only, bytecode caches left behind (symlinks, hard links, devices, FIFOs and sockets are left behind and listed),
every name inside the declared path (no `..`, nothing absolute), modes without set-uid,
set-gid or sticky bits, and a bound on the bytes of file data and on the number of entries.
The archive comes from dockerd's archive endpoint (nothing runs in the agent's sandbox) and
is read as a stream, so a product over the bound is refused before it is held in memory.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MAX_ENTRIES = 200_000
MAX_LISTED = 200  # dropped entries named in the trial's record; more are counted


class WorkProductError(RuntimeError):
    """The work product cannot be carried (over its bound): the trial is graded 0 (`failed_tests`)."""


@dataclass
class Carried:
    """One path of the work product, as a tar to extract at `/` in the clean sandbox."""

    path: str
    archive: bytes = b""
    files: int = 0
    folders: int = 0
    bytes: int = 0
    dropped: list[str] = field(default_factory=list)   # "<kind> <path>"
    dropped_count: int = 0
    missing: bool = False

    def summary(self) -> dict[str, object]:
        return {"path": self.path, "missing": self.missing, "files": self.files, "folders": self.folders,
                "bytes": self.bytes, "dropped": self.dropped, "dropped_count": self.dropped_count}


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (docker's archive stream), bounded in total size."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""
        self._read = 0
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[no-untyped-def]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
            self._read += len(self._buffer)
            if self._read > self._limit:
                raise WorkProductError(f"the work product's archive is over {self._limit} bytes")
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.isfifo():
        return "fifo"
    if member.isdev():
        return "device"
    return "other"


def carry(chunks: Iterable[bytes], path: str, max_bytes: int) -> Carried:
    """The tar stream of docker's `GET /containers/{id}/archive?path=PATH` (entries `<basename>/...`),
    filtered into an archive whose entries sit at PATH (relative to /)."""
    path = posixpath.normpath(path)
    parent, base = posixpath.split(path)
    carried = Carried(path)
    out = io.BytesIO()
    # tar headers and padding cost at most ~1.5 KiB an entry beyond the data
    stream = io.BufferedReader(_ChunkReader(chunks, max_bytes + MAX_ENTRIES * 1536))
    with tarfile.open(fileobj=stream, mode="r|") as source, tarfile.open(fileobj=out, mode="w") as target:
        entries = 0
        for member in source:
            entries += 1
            if entries > MAX_ENTRIES:
                raise WorkProductError(f"{path} holds more than {MAX_ENTRIES} entries")
            name = posixpath.normpath(member.name)
            inside = name == base or name.startswith(base + "/")
            where = posixpath.join(parent, name)
            if not inside or ".." in name.split("/") or name.startswith("/"):
                _drop(carried, f"outside {where}")
                continue
            if "__pycache__" in name.split("/"):  # caches are no work product: Python recompiles (a forged one
                _drop(carried, f"cache {where}")  # would run code the source does not show)
                continue
            if not (member.isreg() or member.isdir()):
                _drop(carried, f"{_kind(member)} {where}")
                continue
            clean = tarfile.TarInfo(posixpath.join(parent, name).lstrip("/"))
            clean.mode = member.mode & 0o777
            clean.uid, clean.gid, clean.mtime = member.uid, member.gid, member.mtime
            if member.isdir():
                clean.type = tarfile.DIRTYPE
                target.addfile(clean)
                carried.folders += 1
                continue
            carried.bytes += member.size
            if carried.bytes > max_bytes:
                raise WorkProductError(f"{path} holds more than {max_bytes} bytes of files "
                                       "(raise [verifier.rlkit].work_product_max_mb, or leave build output out)")
            clean.type, clean.size = tarfile.REGTYPE, member.size
            target.addfile(clean, source.extractfile(member))
            carried.files += 1
    carried.archive = out.getvalue()
    return carried


def _drop(carried: Carried, what: str) -> None:
    carried.dropped_count += 1
    if len(carried.dropped) < MAX_LISTED:
        carried.dropped.append(what)
