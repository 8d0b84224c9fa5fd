"""The one way to read a file a user points at (issue 25): special files refused before they are
opened, size, depth, node count and integer length bounded, shape checked by a pydantic model,
and every failure one FileReadError naming the file and what is wrong."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel, StrictInt

from rlkit.config.files import (
    FileReadError,
    open_regular,
    read_bytes,
    read_int,
    read_json,
    read_model,
    read_text,
    read_yaml,
)


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)  # a plain open() would block until a writer came
    elif kind == "zero_link":
        path.symlink_to("/dev/zero")  # never ends
    elif kind == "null_link":
        path.symlink_to("/dev/null")
    elif kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path)
    return path


def _bounded(fn, *args, **kw):
    """Runs fn in a daemon thread: a read that blocks fails the test instead of hanging the suite."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(30)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"{fn.__name__} blocked on {args}"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.parametrize(("kind", "needle"), [
    ("fifo", "is a FIFO (named pipe)"), ("zero_link", "is a character device (a link to one)"),
    ("null_link", "is a character device (a link to one)"), ("dir", "is a directory"), ("loop", "symlink loop"),
])
@pytest.mark.parametrize("reader", [read_bytes, read_text, read_json, read_yaml, open_regular])
def test_special_files_are_refused_before_they_are_opened(tmp_path: Path, kind: str, needle: str, reader) -> None:
    path = _special(tmp_path, kind)
    with pytest.raises(FileReadError) as err:
        _bounded(reader, path)
    assert needle in err.value.message and str(path) in err.value.message and err.value.file


def test_size_is_bounded_even_when_the_file_claims_none(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(FileReadError, match="too big"):
        read_bytes(big, max_bytes=1000)
    assert read_bytes(Path("/proc/self/status"), max_bytes=100_000).startswith(b"Name:")  # st_size is 0 there
    with pytest.raises(FileReadError, match="too big"):
        read_bytes(Path("/proc/self/status"), max_bytes=10)


@pytest.mark.parametrize(("content", "needle"), [
    (b"[" * 100_000, "nested too deeply"),
    (b"[" * 100 + b"]" * 100, "nested more than 64 levels deep"),
    (b'{"max_position_embeddings": ' + b"9" * 5000 + b"}", "integer of 5000 digits"),
    (b'{"a": NaN}', "holds NaN, which is not JSON"),
    (b'{"a": -Infinity}', "holds -Infinity"),
    (b"{nope", "is not valid JSON"),
    (b'{"a": "\xff"}', "is not UTF-8"),
])
def test_json_is_bounded_and_every_failure_names_the_file(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(FileReadError) as err:
        read_json(path)
    assert needle in err.value.message and str(path) in err.value.message


def test_yaml_alias_bomb_stops_at_the_node_bound(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 nodes, 300 bytes
    path = tmp_path / "kubeconfig"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FileReadError, match="more than 1000000 values"):
        _bounded(read_yaml, path)


def test_yaml_tags_that_build_objects_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("!!python/object/apply:os.system ['touch /tmp/never']\n")
    with pytest.raises(FileReadError, match="not valid YAML"):
        read_yaml(path)


class _Window(BaseModel):
    max_position_embeddings: StrictInt | None = None
    nested: list[_Window] | None = None


def test_shape_errors_name_the_field_never_the_value_nor_pydantic_internals(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"max_position_embeddings": "4096-secret-looking", "nested": [{"max_position_embeddings": 1.5}]}')
    with pytest.raises(FileReadError) as err:
        read_model(path, _Window)
    message = err.value.message
    assert "max_position_embeddings: Input should be a valid integer" in message
    assert "nested.0.max_position_embeddings" in message
    assert "4096-secret-looking" not in message and "instance of" not in message and "int]" not in message


@pytest.mark.parametrize(("text", "ok"), [("12\n", 12), ("0", 0), ("12\x1b[2J", None), ("x", None), ("-3", None),
                                         ("9" * 30, None), ("\u0661\u0662", None)])
def test_marker_files_hold_one_bounded_number(tmp_path: Path, text: str, ok: int | None) -> None:
    path = tmp_path / "latest_checkpointed_iteration.txt"
    path.write_text(text)
    if ok is not None:
        assert read_int(path) == ok
        return
    with pytest.raises(FileReadError) as err:
        read_int(path)
    assert str(path) in err.value.message and "\x1b" not in err.value.message
