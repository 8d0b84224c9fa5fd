"""Reading growing log files without re-reading them: byte offsets, bounded head and tail reads.

A trainer appends whole lines; a reader may catch the last one half written. `LineTail`
returns only complete lines and keeps the torn rest for the next poll. A file that shrank
(rotated or truncated) is read again from its start.

Every reader here is linear in the bytes it reads and holds at most MAX_LINE bytes of one line:
a longer line (a torn write of a killed run, a file someone else filled) is skipped, never
parsed, and counted in the `Skips` the caller passes (what `rlkit status` warns about).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rlkit.config.files import FileReadError, open_regular

CHUNK = 1 << 20
MAX_LINE = 4 << 20  # bytes; verl's longest console line is a few KB


class Skips:
    """Lines a reader skipped because they were longer than MAX_LINE (by file name)."""

    def __init__(self) -> None:
        self.by_file: dict[str, int] = {}

    def add(self, path: Path, n: int = 1) -> None:
        self.by_file[path.name] = self.by_file.get(path.name, 0) + n

    def messages(self) -> list[str]:
        return [f"{name}: skipped {n} line(s) longer than {MAX_LINE >> 20} MiB (torn or not a log line)"
                for name, n in sorted(self.by_file.items())]


class LineTail:
    """New complete lines of one file since the last `poll()`; `offset` is where the next read starts."""

    def __init__(self, path: Path, offset: int = 0, skips: Skips | None = None) -> None:
        self.path = path
        self.offset = offset
        self.skips = skips
        self._inode: int | None = None
        self._skipping = False  # inside a line longer than MAX_LINE

    def poll(self, max_bytes: int = 64 * CHUNK) -> list[str]:
        """Complete lines appended since the last poll, at most `max_bytes` read (ask again for the rest)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if st.st_size < self.offset or (self._inode is not None and st.st_ino != self._inode):
            self.offset, self._skipping = 0, False  # truncated or replaced: start over
        self._inode = st.st_ino
        if st.st_size == self.offset:
            return []
        try:
            f = open_regular(self.path)  # a FIFO or a device named like a log never blocks a reader
        except FileReadError:
            return []
        with f:
            f.seek(self.offset)
            data = f.read(min(max(max_bytes, MAX_LINE + 1), st.st_size - self.offset))
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_LINE:  # one line longer than any log line: passed over, not waited for forever
                if not self._skipping and self.skips is not None:
                    self.skips.add(self.path)
                self.offset += len(data)
                self._skipping = True
            return []
        self.offset += end + 1
        lines = data[:end].split(b"\n")
        if self._skipping:  # the end of a line skipped in an earlier poll
            lines, self._skipping = lines[1:], False
        out = []
        for raw in lines:
            if len(raw) > MAX_LINE:
                if self.skips is not None:
                    self.skips.add(self.path)
                continue
            out.append(raw.decode("utf-8", "replace"))
        return out


def lines_from_end(path: Path, chunk: int = 64 * 1024, skips: Skips | None = None,
                   max_bytes: int = 256 * CHUNK) -> Iterator[str]:
    """Lines of a file from the last one backwards, reading only as much of the end as asked for (at most
    `max_bytes`). Linear: a line longer than MAX_LINE is passed over block by block (counted in `skips`), never
    joined."""
    try:
        f = open_regular(path)  # closed in finally; the generator may stop early
    except FileReadError:
        return
    try:
        pos = f.seek(0, os.SEEK_END)
        rest: list[bytes] = []  # the pieces of the line that begins before `pos`, last first
        rest_len, too_long = 0, False
        end = pos
        while pos > 0:
            if end - pos >= max_bytes:
                if too_long and skips is not None:
                    skips.add(path)
                return
            step = min(CHUNK if too_long else chunk, pos)  # passing over a long line: big reads
            pos -= step
            f.seek(pos)
            block = f.read(step)
            cut = block.find(b"\n")
            if cut < 0:  # the line goes on into earlier blocks
                if not too_long:
                    rest.append(block)
                    rest_len += len(block)
                    too_long = rest_len > MAX_LINE
                    if too_long:
                        rest = []
                continue
            parts = block[cut + 1:].split(b"\n")
            parts[-1] += b"".join(reversed(rest))
            last_whole = not too_long
            rest, rest_len, too_long = [block[:cut]], cut, cut > MAX_LINE
            for i, part in enumerate(reversed(parts)):
                if i == 0 and not last_whole:
                    if skips is not None:
                        skips.add(path)
                    continue
                if len(part) > MAX_LINE:
                    if skips is not None:
                        skips.add(path)
                elif part:
                    yield part.decode("utf-8", "replace")
        if too_long:
            if skips is not None:
                skips.add(path)
        elif first := b"".join(reversed(rest)):
            yield first.decode("utf-8", "replace")
    finally:
        f.close()


def lines_from_start(path: Path, max_bytes: int = 64 * CHUNK, skips: Skips | None = None) -> Iterator[str]:
    """Lines from the beginning, at most `max_bytes` read (a bounded look for the first records); a line longer
    than MAX_LINE is read past in pieces, never held whole."""
    try:
        f = open_regular(path)
    except FileReadError:
        return
    try:
        read, long_line = 0, False
        while read <= max_bytes:
            raw = f.readline(MAX_LINE + 1)
            if not raw:
                return
            read += len(raw)
            if read > max_bytes:
                return
            whole = raw.endswith(b"\n")
            if long_line or (len(raw) > MAX_LINE and not whole):
                if not long_line and skips is not None:
                    skips.add(path)
                long_line = not whole
                continue
            yield raw.decode("utf-8", "replace").rstrip("\n")
    finally:
        f.close()
