"""Tar helpers shared by both backends."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from rlkit.sandbox import _tar


def _archive(entries: list[tarfile.TarInfo], payloads: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in entries:
            data = payloads.get(info.name)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def test_extract_dir_strips_top_and_skips_hostile_members(tmp_path: Path) -> None:
    data = _archive([_entry("agent", tarfile.DIRTYPE), _entry("agent/log.txt"),
                     _entry("agent/escape", tarfile.SYMTYPE, "/etc/passwd"),
                     _entry("agent/up", tarfile.SYMTYPE, "../../outside"), _entry("agent/fifo", tarfile.FIFOTYPE),
                     _entry("agent/ok-link", tarfile.SYMTYPE, "log.txt")],
                    {"agent/log.txt": b"hello"})
    out = tmp_path / "out"
    _tar.extract_dir(data, out, strip_top=True)
    assert (out / "log.txt").read_text() == "hello"
    assert (out / "ok-link").read_text() == "hello"
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "ok-link"]


def test_pack_dir_and_file_layout(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.sh").write_text("echo")
    (src / "sub" / "a.sh").chmod(0o755)
    with tarfile.open(fileobj=io.BytesIO(_tar.pack_dir(src, "/tests/"))) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert set(names) == {"tests/sub", "tests/sub/a.sh"}  # no entry for /tests itself
    assert names["tests/sub/a.sh"].mode & 0o111
    (tmp_path / "empty").mkdir()
    with tarfile.open(fileobj=io.BytesIO(_tar.pack_dir(tmp_path / "empty", "/made"))) as tar:
        assert [m.name for m in tar.getmembers()] == ["made"]
    with tarfile.open(fileobj=io.BytesIO(_tar.pack_file(src / "sub" / "a.sh", "/x/y/run.sh"))) as tar:
        assert [m.name for m in tar.getmembers()] == ["x/y/run.sh"]
    target = tmp_path / "one" / "copy.sh"
    _tar.extract_single_file(_tar.pack_file(src / "sub" / "a.sh", "/x/run.sh"), target)
    assert target.read_text() == "echo"
