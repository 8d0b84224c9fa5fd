"""Reading growing log files without re-reading them: byte offsets, bounded head and tail reads.

A trainer appends whole lines; a reader may catch the last one half written. `LineTail`
returns only complete lines and keeps the torn rest for the next poll. A file that shrank
(rotated or truncated) is read again from its start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rlkit.config.files import FileReadError, open_regular

CHUNK = 1 << 20


class LineTail:
    """New complete lines of one file since the last `poll()`; `offset` is where the next read starts."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._inode: int | None = None

    def poll(self, max_bytes: int | None = None) -> list[str]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if st.st_size < self.offset or (self._inode is not None and st.st_ino != self._inode):
            self.offset = 0  # truncated or replaced: start over
        self._inode = st.st_ino
        if st.st_size == self.offset:
            return []
        try:
            f = open_regular(self.path)  # a FIFO or a device named like a log never blocks a reader
        except FileReadError:
            return []
        with f:
            f.seek(self.offset)
            data = f.read(max_bytes if max_bytes is not None else st.st_size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return data[: end + 1].decode("utf-8", "replace").splitlines()


def lines_from_end(path: Path, chunk: int = 64 * 1024) -> Iterator[str]:
    """Lines of a file from the last one backwards, reading only as much of the end as asked for."""
    try:
        f = open_regular(path)  # closed in finally; the generator may stop early
    except FileReadError:
        return
    try:
        pos = f.seek(0, os.SEEK_END)
        rest = b""
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step) + rest
            parts = block.split(b"\n")
            rest = parts[0]
            for part in reversed(parts[1:]):
                if part:
                    yield part.decode("utf-8", "replace")
        if rest:
            yield rest.decode("utf-8", "replace")
    finally:
        f.close()


def lines_from_start(path: Path, max_bytes: int = 64 * CHUNK) -> Iterator[str]:
    """Lines from the beginning, at most `max_bytes` read (a bounded look for the first records)."""
    try:
        f = open_regular(path)
    except FileReadError:
        return
    try:
        read = 0
        for raw in f:
            read += len(raw)
            if read > max_bytes:
                return
            yield raw.decode("utf-8", "replace").rstrip("\n")
    finally:
        f.close()
