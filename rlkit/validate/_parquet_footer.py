"""Reads a parquet file's row count and top-level column names from its footer.

Importing pyarrow costs more than the whole rest of a preflight, and a check needs only
two facts from the footer. The footer is a Thrift compact-protocol `FileMetaData`
(parquet-format spec): field 2 is the flattened schema, field 3 the row count. This
reader decodes just those and skips everything else; it never reads row data.

The footer is untrusted input: every length is checked against the bytes left, nesting
is bounded and the schema tree is walked without recursion, so a truncated, hostile or
3,000-deep footer is a ParquetFooterError, never a hang or a RecursionError.
"""

from __future__ import annotations

import struct

from rlkit.config.files import FileReadError, open_regular

MAGIC = b"PAR1"
MAX_FOOTER = 64 * 2**20
MAX_DEPTH = 64  # nested thrift structs/lists; real footers use a handful
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class ParquetFooterError(ValueError):
    """Not a parquet file, or a footer this reader cannot decode."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ParquetFooterError("footer ends early")

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ParquetFooterError("footer ends early")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ParquetFooterError("bad varint")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        out = self.data[self.pos:self.pos + n]
        if len(out) != n:
            raise ParquetFooterError("footer ends early")
        self.pos += n
        return out

    def fields(self):
        last = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == _STOP:
                return
            delta = header >> 4
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        size = self.varint() if size == 15 else size
        self.need(size)  # every element takes at least a byte: a bigger count is a lie
        return size, header & 0x0F

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise ParquetFooterError("footer nested too deeply")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.need(1)
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.need(8)
            self.pos += 8
        elif kind == _BINARY:
            self.binary()
        elif kind in (_LIST, _SET):
            size, elem = self.list_header()
            for _ in range(size):
                if elem in (_TRUE, _FALSE):  # list booleans take a byte each
                    self.need(1)
                    self.pos += 1
                else:
                    self.skip(elem, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                self.need(size)
                types = self.byte()
                for _ in range(size):
                    for part in (types >> 4, types & 0x0F):
                        if part in (_TRUE, _FALSE):  # map booleans take a byte each too
                            self.need(1)
                            self.pos += 1
                        else:
                            self.skip(part, depth + 1)
        elif kind == _STRUCT:
            for _, inner in self.fields():
                self.skip(inner, depth + 1)
        else:
            raise ParquetFooterError(f"unknown thrift type {kind}")


def _schema_element(r: _Reader) -> tuple[str, int]:
    name, children = "", 0
    for fid, kind in r.fields():
        if fid == 4 and kind == _BINARY:
            name = r.binary().decode("utf-8", "replace")
        elif fid == 5 and kind == _I32:
            children = r.zigzag()
        else:
            r.skip(kind)
    return name, children


def read_footer(path: str) -> tuple[int, list[str]]:
    """(num_rows, top-level column names)."""
    r = _footer_reader(path)
    elements: list[tuple[str, int]] = []
    num_rows = -1
    for fid, kind in r.fields():
        if fid == 2 and kind == _LIST:
            count, _ = r.list_header()
            elements = [_schema_element(r) for _ in range(count)]
        elif fid == 3 and kind == _I64:
            num_rows = r.zigzag()
            break  # row groups and the rest are not needed
        else:
            r.skip(kind)
    if not elements or num_rows < 0:
        raise ParquetFooterError("footer has no schema or row count")
    return num_rows, _top_level(elements)


def read_key_values(path: str) -> dict[str, str]:
    """The footer's key-value metadata (field 5: writers' notes such as pyarrow's schema)."""
    r = _footer_reader(path)
    out: dict[str, str] = {}
    for fid, kind in r.fields():
        if fid == 5 and kind == _LIST:
            count, _ = r.list_header()
            for _ in range(count):
                key, value = "", ""
                for kfid, kkind in r.fields():
                    if kfid == 1 and kkind == _BINARY:
                        key = r.binary().decode("utf-8", "replace")
                    elif kfid == 2 and kkind == _BINARY:
                        value = r.binary().decode("utf-8", "replace")
                    else:
                        r.skip(kkind)
                out[key] = value
            break
        r.skip(kind)
    return out


def _footer_reader(path: str) -> _Reader:
    try:
        f = open_regular(path)  # a FIFO would block a plain open, a device never end
    except FileReadError as exc:
        if exc.errno is not None:
            raise OSError(exc.errno, exc.reason) from None  # missing, no permission: the caller's OSError path
        raise ParquetFooterError(exc.reason) from None
    with f:
        f.seek(0, 2)
        size = f.tell()
        if size < 12:
            raise ParquetFooterError("file too small to be parquet")
        f.seek(0)
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
        length = struct.unpack("<I", tail[:4])[0]
        if head != MAGIC or tail[4:] != MAGIC:
            raise ParquetFooterError("no PAR1 magic (encrypted footers are not supported)")
        if length > size - 12:
            raise ParquetFooterError("footer length out of range")
        if length > MAX_FOOTER:
            raise ParquetFooterError(f"footer of {length} bytes is too big for a task index")
        f.seek(size - 8 - length)
        return _Reader(f.read(length))


def _top_level(elements: list[tuple[str, int]]) -> list[str]:
    """The root's direct children of the depth-first flattened schema (walked with a stack)."""
    names: list[str] = []
    i = 1
    for _ in range(max(elements[0][1], 0)):
        if i >= len(elements):
            raise ParquetFooterError("schema tree is truncated")
        names.append(elements[i][0])
        pending = 1  # nodes of this column's subtree still to pass
        while pending:
            if i >= len(elements):
                raise ParquetFooterError("schema tree is truncated")
            pending += max(elements[i][1], 0) - 1
            i += 1
    return names
