"""The Python API on bad arguments and secrets (issue 48): no secret in repr() or str() of a report or a
resolved config, only rlkit.errors types for bad arguments, control characters escaped in UserError."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlkit
from rlkit.errors import ArgumentError, RlkitError, UserError
from tests.validate.helpers import Workspace

WANDB = "wandb-Zq8Xr2Lm5Nv7Tp1Kd4Hs9Wf3"
HF = "hf_Qw3Er5Ty7Ui9Op1As2Df4"


def test_no_secret_in_repr_or_str_of_a_report_or_a_resolved_config(ws: Workspace) -> None:
    environ = {**ws.environ(), "HF_TOKEN": HF}
    resolved = rlkit.resolve(ws.config(), environ=environ, WANDB_API_KEY=WANDB)
    report = rlkit.check(resolved, only=["types"])
    for shown in (repr(resolved), str(resolved), repr(report), str(report), repr([report]), f"{report}"):
        assert WANDB not in shown and HF not in shown, shown
    assert "WANDB_API_KEY" in repr(resolved)  # which keys were given, never their values
    assert "PreflightReport(ok=" in repr(report)


@pytest.mark.parametrize("call", [
    lambda: rlkit.status("x" * 300), lambda: rlkit.status(root="\0"), lambda: rlkit.status("a/../../etc"),
    lambda: rlkit.status("run\x1b]0;t\x07"), lambda: rlkit.status(root="x" * 5000),
])
def test_bad_status_arguments_raise_user_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        call()
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)


def test_an_integer_past_pythons_digit_limit_is_a_finding(ws: Workspace) -> None:
    report = rlkit.check(ws.config(), only=["types"], TRAIN_BSZ=10**5000)
    assert not report.ok and any(f.key == "TRAIN_BSZ" or "TRAIN_BSZ" in f.message for f in report.fatal)


def test_unknown_keywords_are_rlkit_errors_and_still_type_errors(ws: Workspace) -> None:
    with pytest.raises(ArgumentError) as err:
        rlkit.check(ws.config(), train_bsz=8)
    assert isinstance(err.value, RlkitError) and isinstance(err.value, TypeError)
    with pytest.raises(ArgumentError):
        rlkit.resolve(12345)  # type: ignore[arg-type]


def test_user_error_escapes_control_characters() -> None:
    err = UserError("no run 'a\x1b[2Jb\u202e'", fix="rename \x07it", key="K\x9b", file="f\x00")
    text = str(err)
    assert "\\x1b[2J" in text and "\\u202e" in text and "\\x07" in text
    assert not any(c in text for c in "\x1b\x07\x9b\x00\u202e")
