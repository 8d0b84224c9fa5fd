"""The one place every message passes through (issue 25): secrets masked in every form a message can
give them, control characters shown escaped, clipping after masking; the terminal stream, the log
filter and findings all go through it."""

from __future__ import annotations

import io
import json
import logging
import shlex

import pytest

from rlkit.config import secrets
from rlkit.config.display import CleanFilter, SafeStream, clean, styled_output
from rlkit.config.files import clip
from rlkit.config.secrets import is_secret_name, mask_secrets

SECRET = "hf_Zq8Xr2Lm5Nv7Tp1Kd4Hs9Wf3"


@pytest.fixture(autouse=True)
def _remembered():
    secrets.remember([SECRET], environ={})
    yield
    secrets.remember([], environ={})


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "GITHUB_TOKEN", "WANDB_API_KEY", "wandb_api_key",
                                  "hf_token", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "my_secret", "Token", "API_KEY"])
def test_credential_names_are_secret_in_any_case(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["RAY_AUTH_TOKEN_PATH", "MAX_PROMPT", "KEYBOARD", "TOKENIZERS_PARALLELISM", "PATH"])
def test_ordinary_names_are_not(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize("secret", ["ab'cd\"ef\\gh-0123456789", "nb\u00a0space-0123456789", "tab\there-0123456789",
                                    "esc\x1bhere-0123456789", "uni\u2028code-0123456789"])
@pytest.mark.parametrize("how", [str, repr, lambda s: json.dumps(s), lambda s: json.dumps(s, ensure_ascii=False),
                                 shlex.quote, lambda s: s.encode("unicode_escape").decode(), lambda s: repr(f"x-{s}"),
                                 lambda s: repr([s, "y"])])
def test_a_secret_is_masked_quoted_or_escaped(secret: str, how) -> None:
    shown = f"message: {how(secret)} (fix: ...)"
    out = clean(shown, secrets=[secret])
    assert "0123456789" not in out and "****" in out


def test_a_secret_is_masked_in_part_and_when_clipped() -> None:
    listed = "unknown logger(s) alpha-0123, bravo-4567-xyz; verl knows console"
    assert "alpha-0123" not in mask_secrets(listed, ["alpha-0123,bravo-4567-xyz"])  # split at the comma
    assert "bravo-4567-xyz" not in mask_secrets(listed, ["alpha-0123,bravo-4567-xyz"])
    clipped = clip(f"EXP_NAME='run-{SECRET}'", 24)  # what a 24-character display leaves of it
    assert SECRET[:10] in clipped and SECRET[:4] not in mask_secrets(clipped)
    assert mask_secrets("a 2048… (3 more characters)") == "a 2048… (3 more characters)"  # not a secret: kept


def test_clip_comes_after_masking_in_findings() -> None:
    from rlkit.validate.findings import MESSAGE_MAX, Finding, Status

    f = Finding("types", Status.FATAL, "x" * (MESSAGE_MAX - 10) + SECRET, "fix")
    assert SECRET[:4] not in f.message and len(f.message) <= MESSAGE_MAX + 40


def test_control_characters_are_shown_escaped() -> None:
    out = clean("host \x1b]52;c;SGVsbG8=\x07 user \x9b2J \u202eevil\r\n", keep="\n")
    assert "\\x1b]52" in out and "\\x07" in out and "\\x9b" in out and "\\u202e" in out and "\\x0d" in out
    assert not any(ord(ch) < 32 and ch != "\n" for ch in out)


def test_the_terminal_stream_cleans_whole_lines() -> None:
    sink = io.StringIO()
    stream = SafeStream(sink)
    stream.write(f"key {SECRET[:10]}")  # one line in two writes: masked all the same
    stream.write(f"{SECRET[10:]} and \x1b[2J\n")
    stream.write("tail without newline")
    stream.flush()
    assert sink.getvalue() == "key **** and \\x1b[2J\ntail without newline"


def test_a_styled_stream_keeps_rich_colours_but_no_other_escape() -> None:
    sink = io.StringIO()
    stream = styled_output(sink)
    stream.write(f"\x1b[1;31mred\x1b[0m \x1b]0;title\x07 {SECRET}\r\x1b[2K\x1b[1A\n")
    stream.flush()
    assert sink.getvalue() == "\x1b[1;31mred\x1b[0m \\x1b]0;title\\x07 ****\r\x1b[2K\x1b[1A\n"


def test_log_records_are_cleaned(caplog) -> None:
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "got %r from \x1b[2J", (SECRET,), None)
    assert CleanFilter().filter(record)
    assert record.getMessage() == "got '****' from \\x1b[2J"


def test_resolve_remembers_config_and_environment_secrets(ws) -> None:
    from rlkit.config.resolve import resolve
    from rlkit.validate.findings import Finding, Status

    cfg = ws.config()
    cfg.write_text(cfg.read_text() + "hf_token=hf_fromTheConfig0123456789\n")  # lowercase, unknown, still secret
    resolved = resolve(cfg, ws.environ(GITHUB_TOKEN="ghp_fromTheEnvironment0123"))
    f = Finding("x", Status.WARN, "hf_fromTheConfig0123456789 ghp_fromTheEnvironment0123", "")
    assert f.message == "**** ****"
    assert {"hf_fromTheConfig0123456789", "ghp_fromTheEnvironment0123"} <= resolved.secrets
