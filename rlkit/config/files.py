"""Reading files a user points at: the one way, with one error path.

Every file rlkit reads because a config or a command named it (configs, a model's config.json,
tokenizer files and chat template, task indexes and their metadata, run locks, checkpoint
markers, kube configs, a run's logs and summaries) is read here:

    read_bytes / read_text     a regular file only, refused before it is opened when it is a FIFO,
                               a device, a socket or a link to one; bounded in size
    read_json / read_yaml      also bounded in nesting depth and node count; JSON integers in digits,
                               no NaN / Infinity
    read_model(path, Model)    the shape checked by a pydantic model
    read_int(path, lo, hi)     a marker file holding one number (a checkpoint's step)
    open_regular(path)         a binary stream, for readers that seek and tail (logs)
    check_tree(folder)         every entry of a folder (a task's build context): regular files and folders
                               only, no link out of it, bounded in count and bytes

Files other people wrote (a run's outputs, a third-party task, a model folder on a shared disk) are
read with `root=` their folder: a path whose real location leaves `root` (a link to /etc/shadow, to
/proc/self/environ) is refused like a FIFO is.

Every way a read can fail (missing, a directory, a symlink loop, a path under a regular file,
a name too long, a NUL in the path, no permission, not a regular file, too big, not UTF-8,
not JSON, nested too deeply, the wrong shape) becomes one `FileReadError` naming the file and
the problem (with the line and byte offset where there is one). Callers turn it into a finding.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

from rlkit.errors import UserError

MAX_TEXT_BYTES = 16 * 2**20  # configs, model JSON, chat templates, kube configs are far smaller
MAX_DEPTH = 64  # nesting of JSON / YAML: model configs nest 3 levels, kube configs 4
MAX_NODES = 1_000_000  # values in one document (YAML aliases can make a small file enormous)
MAX_INT_DIGITS = 40  # a JSON integer longer than this is not a count of anything

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
    """A file could not be read as what it should be. `reason` is the problem without the file name."""

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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def inside(path: str | Path, root: str | Path) -> bool:
    """Does `path`, every link followed, stay under `root` (itself resolved)? False for any unreadable path."""
    try:
        real, base = os.path.realpath(path), os.path.realpath(root)
    except (OSError, ValueError):
        return False
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def confine(path: str | Path, root: str | Path | None) -> None:
    """FileReadError when `path` leads out of `root` (a link to a file elsewhere)."""
    if root is not None and not inside(path, root):
        raise FileReadError(path, f"leads out of its folder {clip(str(root), 120)} (a link to a file elsewhere)",
                            fix="replace the link with the file itself")


def _open_regular_fd(path: str | Path, max_bytes: int | None, root: str | Path | None = None) -> int:
    """An fd of `path`, refused before the open when it is not a regular file (a FIFO would block,
    a device never end) or when it leads out of `root`, and checked again on the open file (no swap in between)."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise FileReadError(path, "is a directory, not a file", errno_=errno.EISDIR)
        if not stat.S_ISREG(st.st_mode):
            link = " (a link to one)" if os.path.islink(path) else ""
            raise FileReadError(path, f"is {_kind(st.st_mode)}{link}, not a regular file",
                                fix="point at a regular file")
        confine(path, root)  # after the kind: a link to /dev/zero is named as a device
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileReadError(path, f"is too big ({st.st_size} bytes; at most {max_bytes} are read)")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise FileReadError(path, "changed while it was opened (it is not a regular file now)")
        os.set_blocking(fd, True)
        return fd
    except FileReadError:
        raise
    except OSError as exc:
        raise FileReadError(path, os_reason(exc), errno_=exc.errno) from None
    except ValueError:  # a NUL inside the path
        raise FileReadError(path, "has a NUL character in its path") from None


def open_regular(path: str | Path, *, root: str | Path | None = None) -> IO[bytes]:
    """A binary stream of a regular file (FileReadError otherwise): for readers that seek and tail."""
    return os.fdopen(_open_regular_fd(path, None, root), "rb")


def read_bytes(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES, root: str | Path | None = None) -> bytes:
    """The file's bytes: a regular file of at most `max_bytes` (a /proc file that claims 0 bytes
    and grows is cut at the bound too)."""
    with os.fdopen(_open_regular_fd(path, max_bytes, root), "rb") as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise FileReadError(path, os_reason(exc), errno_=exc.errno) from None
    if len(data) > max_bytes:
        raise FileReadError(path, f"is too big (more than {max_bytes} bytes)")
    return data


def decode_utf8(data: bytes, path: str | Path, *, fix: str = "save it as UTF-8") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileReadError(path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded)",
                            fix=fix, line=line, offset=exc.start) from None


def read_text(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES, fix: str = "save it as UTF-8",
              root: str | Path | None = None) -> str:
    """A UTF-8 text file, or FileReadError."""
    return decode_utf8(read_bytes(path, max_bytes=max_bytes, root=root), path, fix=fix)


class _Refused(ValueError):
    """A JSON value the reader will not build (raised from json's parse hooks)."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"holds an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> float:
    raise _Refused(f"holds {name}, which is not JSON")


def parse_json(text: str, path: str | Path, *, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text of `path` (already read), bounded like read_json."""
    import json

    try:
        data = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise FileReadError(path, f"is not valid JSON ({exc.msg} at column {exc.colno})", line=exc.lineno,
                            offset=exc.pos) from None
    except _Refused as exc:
        raise FileReadError(path, str(exc)) from None
    except RecursionError:
        raise FileReadError(path, f"is JSON nested too deeply to read (at most {max_depth} levels)") from None
    except ValueError as exc:  # an integer past Python's digit limit, raised before parse_int
        raise FileReadError(path, f"is not valid JSON ({clip(str(exc), 80)})") from None
    check_shape(data, path, max_depth=max_depth)
    return data


def read_json(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES, max_depth: int = MAX_DEPTH,
              root: str | Path | None = None) -> Any:
    """A JSON file, or FileReadError naming the line and column of a syntax error."""
    return parse_json(read_text(path, max_bytes=max_bytes, root=root), path, max_depth=max_depth)


def json_value(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """One JSON value of a line a log holds (an attempt marker, a metric record), bounded like read_json;
    None when it is not one (a torn line, nesting past the bound, an integer too long, NaN)."""
    try:
        return parse_json(text, "<line>", max_depth=max_depth)
    except FileReadError:
        return None


def read_yaml(path: str | Path, *, max_bytes: int = 4 * 2**20, max_depth: int = MAX_DEPTH,
              root: str | Path | None = None) -> Any:
    """A YAML file (safe_load: no tags that build objects), bounded like read_json."""
    import yaml

    text = read_text(path, max_bytes=max_bytes, root=root)
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise FileReadError(path, f"is not valid YAML ({clip(str(exc.problem or exc.context or 'syntax'), 80)}"
                            f"{where})") from None
    except yaml.YAMLError as exc:
        raise FileReadError(path, f"is not valid YAML ({clip(' '.join(str(exc).split()), 120)})") from None
    except RecursionError:
        raise FileReadError(path, f"is YAML nested too deeply to read (at most {max_depth} levels)") from None
    check_shape(data, path, max_depth=max_depth)
    return data


def check_shape(data: Any, path: str | Path, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Depth and size of a parsed document, walked without recursion (YAML aliases share nodes:
    counted as often as they are reached, so an alias bomb stops at the node bound)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise FileReadError(path, f"holds more than {max_nodes} values (YAML aliases that repeat a block?)")
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= max_depth and len(children):
            raise FileReadError(path, f"is nested more than {max_depth} levels deep")
        stack.extend((child, depth + 1) for child in children)


def _where(loc: tuple, data: Any) -> str:
    """A pydantic error location as the path in the document: keys and indexes only (the names of
    union members pydantic adds, like `str` or `list[...]`, are not in the document and are dropped)."""
    path = []
    for part in loc:
        is_key = isinstance(data, dict) and part in data
        is_index = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if is_key or is_index:
            data = data[part]
            path.append(str(part))
    return ".".join(path) or "the top level"


def shape_error(exc: Any, data: Any = None) -> str:
    """A pydantic ValidationError as one line: where in the file, and what is wrong (never the value)."""
    parts: list[str] = []
    for err in exc.errors(include_url=False, include_input=False):
        msg = re.sub(r" or instance of \w+", "", str(err["msg"]))
        line = f"{clip(_where(err['loc'], data), 60)}: {clip(msg, 100)}"
        if line not in parts:
            parts.append(line)
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def validate_model[M](data: Any, model: type[M], path: str | Path, *, fix: str = "") -> M:
    """`data` (parsed from `path`) as `model`, or FileReadError saying which field is wrong."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)  # type: ignore[attr-defined,no-any-return]
    except ValidationError as exc:
        raise FileReadError(path, f"has the wrong shape: {shape_error(exc, data)}", fix=fix) from None


def read_model[M](path: str | Path, model: type[M], *, fmt: str = "json", max_bytes: int = MAX_TEXT_BYTES,
               fix: str = "", root: str | Path | None = None) -> M:
    """A JSON (or YAML) file validated by a pydantic model; FileReadError names what is wrong."""
    data = (read_yaml(path, max_bytes=max_bytes, root=root) if fmt == "yaml"
            else read_json(path, max_bytes=max_bytes, root=root))
    return validate_model(data, model, path, fix=fix)


def read_int(path: str | Path, *, lo: int = 0, hi: int = 2**31 - 1) -> int:
    """A marker file holding one whole number in lo..hi (a checkpoint's step)."""
    text = read_text(path, max_bytes=64).strip()
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise FileReadError(path, "does not hold a whole number", fix="delete it, or write the number it should hold")
    value = int(text)
    if not lo <= value <= hi:
        raise FileReadError(path, f"holds {value}, outside {lo}..{hi}", fix="delete it, or write the right number")
    return value


def check_tree(folder: str | Path, *, max_entries: int = 100_000, max_bytes: int = 2 * 2**30,
               max_file_bytes: int = 2**30) -> None:
    """Every entry under `folder` (a task's build context): regular files and folders only (a FIFO would hang
    the tar that sends it to the daemon, a device never end), links only to entries inside `folder`, at most
    `max_entries` entries and `max_bytes` in all (apparent size: a sparse 4 GB file counts 4 GB).
    FileReadError names the first entry that is not."""
    count, total = 0, 0
    for dirpath, dirnames, filenames in os.walk(folder, onerror=_raise_walk_error):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            count += 1
            if count > max_entries:
                raise FileReadError(folder, f"holds more than {max_entries} files", fix="keep the folder small")
            confine(path, folder)
            try:
                st = os.stat(path)
            except OSError as exc:
                raise FileReadError(path, os_reason(exc), errno_=exc.errno) from None
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise FileReadError(path, f"is {_kind(st.st_mode)}, not a regular file",
                                    fix="remove it, or replace it with a regular file")
            if st.st_size > max_file_bytes:
                raise FileReadError(path, f"is too big ({st.st_size} bytes; at most {max_file_bytes})",
                                    fix="remove it, or fetch it while the image builds")
            total += st.st_size
            if total > max_bytes:
                raise FileReadError(folder, f"holds more than {max_bytes} bytes", fix="keep the folder small")


def _raise_walk_error(exc: OSError) -> None:
    raise FileReadError(exc.filename or "?", os_reason(exc), errno_=exc.errno)


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


def present(path: Path) -> bool:
    """Is there anything at `path`, even a broken link or a symlink loop (which reading then names)?"""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False
