from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rlkit.config.envfile import parse_env_text, read_env_file
from rlkit.errors import ConfigError


def parse(text: str):
    return parse_env_text(text, "cfg.env")


def test_key_values_comments_quotes_and_export() -> None:
    env = parse(
        "# a comment\n\nA=1\nexport B=two   # trailing comment\nC='lit ${X} $(no)'\nD=\"dq \\\"x\\\" \\$5\"\n"
        "E=\nF=a#b\n"
    )
    assert not env.errors
    got = {e.key: e.value for e in env.entries}
    assert got == {"A": "1", "B": "two", "C": "lit ${X} $(no)", "D": 'dq "x" $5', "E": "", "F": "a#b"}
    assert [e.line for e in env.entries] == [3, 4, 5, 6, 7, 8]
    assert env.as_dict()["C"].literal and not env.as_dict()["D"].literal


def test_references_are_kept_for_the_resolver() -> None:
    env = parse("A=${B}/x\n")
    assert env.entries[0].value == "${B}/x" and not env.errors


@pytest.mark.parametrize(("line", "needle"), [
    ("X=$(touch /tmp/nope)", "$(...)"),
    ("X=`id`", "backticks"),
    ('X="$(id)"', "$(...)"),
    ("X=$HOME/x", "bare $"),
    ("X=${A:-b}", "malformed"),
    ("X='unterminated", "unterminated single"),
    ('X="unterminated', "unterminated double"),
    ("X=a b", "whitespace"),
    ("X=a;b", "';'"),
    ("X =1", "space before"),
    ("X= 1", "space after"),
    ("1X=1", "invalid key"),
    ("source other.env", "not a KEY=VALUE"),
    ("X='a' b", "after the closing quote"),
])
def test_parse_errors_name_file_line_key_and_fix(line: str, needle: str) -> None:
    env = parse(f"# header\n{line}\n")
    assert len(env.errors) == 1, env.errors
    err = env.errors[0]
    assert needle in err.message
    assert err.file == "cfg.env" and err.line == 2 and err.fix
    if not line.startswith(("1X", "source")):
        assert err.key == "X"
    assert not env.entries


def test_duplicate_keys_keep_the_later_value() -> None:
    env = parse("A=1\nA=2\n")
    assert env.as_dict()["A"].value == "2"
    assert [(a.line, b.line) for a, b in env.duplicates] == [(1, 2)]


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        read_env_file(tmp_path / "nope.env")


def test_hostile_values_never_run(ws, tmp_path: Path) -> None:
    """A config full of command substitutions creates nothing, through the reader and the CLI."""
    marker = Path(f"/tmp/rlkit-hostile-{uuid.uuid4().hex}")
    hostile = (f"PROJECT_NAME=$(touch {marker})\nEXP_NAME=`touch {marker}`\n"
               f"MODEL_PATH=\"$(touch {marker})\"\nTRAIN_FILES='$(touch {marker})'\n")
    cfg = ws.config(text=hostile)
    ws.preflight(cfg)
    proc = subprocess.run([sys.executable, "-m", "rlkit.cli.main", "check", str(cfg)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", **ws.environ()}, cwd=Path(__file__).parents[2], check=False)
    proc2 = subprocess.run(["bash", "scripts/train/train.sh", str(cfg)], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PREFLIGHT_ONLY": "1", **ws.environ()},
                           cwd=Path(__file__).parents[2], check=False)
    assert not marker.exists()
    assert proc.returncode == 1 and proc2.returncode == 1
    assert "command substitution" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
