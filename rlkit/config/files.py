"""Reading files a user points at, with one error path.

Every way a read can fail (missing, a directory, a symlink loop, a path under a regular
file, a name too long, a NUL in the path, no permission, a FIFO that would block, too
big, not UTF-8) becomes one `FileReadError` naming the file and the problem, with the
line and byte offset of the first undecodable byte. Callers turn it into a finding.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlkit.errors import UserError

MAX_TEXT_BYTES = 16 * 2**20  # configs, model JSON, chat templates, kube configs are far smaller

_REASONS = {
    errno.ENOENT: "does not exist",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "has a regular file where a directory should be in its path",
    errno.ELOOP: "is a symlink loop",
    errno.ENAMETOOLONG: "has a name too long for the filesystem",
    errno.EACCES: "is not readable (permission denied)",
    errno.EPERM: "is not readable (operation not permitted)",
}


class FileReadError(UserError):
    """A file could not be read as text. `reason` is the problem without the file name."""

    def __init__(self, path: str | Path, reason: str, *, fix: str = "", line: int | None = None,
                 offset: int | None = None, errno_: int | None = None) -> None:
        shown = clip(str(path), 200)
        where = f" (line {line}, byte offset {offset})" if line is not None else ""
        super().__init__(f"{shown} {reason}{where}", fix=fix, file=shown, line=line)
        self.path, self.reason, self.offset, self.errno = str(path), reason, offset, errno_


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def os_reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno or 0, f"cannot be read ({exc.strerror or type(exc).__name__})")


def read_bytes(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The file's bytes; only a regular file is read (a FIFO or device would block or never end)."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise FileReadError(path, "is a directory, not a file", errno_=errno.EISDIR)
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError(path, "is not a regular file (a device, socket or pipe)")
        if st.st_size > max_bytes:
            raise FileReadError(path, f"is too big ({st.st_size} bytes; at most {max_bytes} are read)")
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)[:max_bytes]
    except FileReadError:
        raise
    except OSError as exc:
        raise FileReadError(path, os_reason(exc), errno_=exc.errno) from None
    except ValueError:  # a NUL inside the path
        raise FileReadError(path, "has a NUL character in its path") from None


def decode_utf8(data: bytes, path: str | Path, *, fix: str = "save it as UTF-8") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileReadError(path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded)",
                            fix=fix, line=line, offset=exc.start) from None


def read_text(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES, fix: str = "save it as UTF-8") -> str:
    """A UTF-8 text file, or FileReadError."""
    return decode_utf8(read_bytes(path, max_bytes=max_bytes), path, fix=fix)


def read_json(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> object:
    """A JSON file, or FileReadError naming the line and column of a syntax error."""
    import json

    text = read_text(path, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileReadError(path, f"is not valid JSON ({exc.msg} at column {exc.colno})", line=exc.lineno,
                            offset=exc.pos) from None
    except RecursionError:
        raise FileReadError(path, "is JSON nested too deeply to read") from None


def is_file(path: Path) -> bool:
    """Path.is_file that is False, not an exception, for any unreadable path."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
