"""The reader and the schema under hostile input (issue 16): line numbers, control characters,
the byte-order mark, comments without a space, secret lines, duplicates at scale, key ranges."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from rlkit.config.envfile import parse_env_text
from rlkit.config.ranges import RULES
from rlkit.config.schema import FIELDS, KEYS, RunConfig, key_rule, type_name

SECRETS = frozenset({"WANDB_API_KEY"})


@pytest.mark.parametrize("sep", ["\f", "\v", "\x85", "\u2028", "\u2029", "\x1c", "\r"])
def test_only_newlines_end_lines(sep: str) -> None:
    env = parse_env_text(f"A=1\n# c{sep}d\nB=2{sep}3\nC=4\r\n", "f")
    assert [(e.key, e.line) for e in env.entries] == [("A", 1), ("C", 4)]
    (err,) = env.errors
    assert err.line == 3 and err.key == "B" and f"U+{ord(sep):04X}" in err.message


def test_tabs_are_whitespace_not_control_characters() -> None:
    env = parse_env_text("A=1\t# comment\n\tB=2\n", "f")
    assert not env.errors and [e.value for e in env.entries] == ["1", "2"]


def test_bom_is_skipped_with_a_note() -> None:
    env = parse_env_text("\ufeffPROJECT_NAME=p\n", "f")
    assert env.entries[0].key == "PROJECT_NAME" and "byte-order mark" in env.notes[0].message


def test_comment_needs_a_space_before_hash() -> None:
    (err,) = parse_env_text("TRAIN_BSZ=2# prompts\n", "f").errors
    assert err.fix == "put a space before '#': TRAIN_BSZ=2 # prompts"
    assert parse_env_text("TRAIN_BSZ=2 # prompts\n", "f").entries[0].value == "2"
    assert parse_env_text("TAG=a#b\n", "f").entries[0].value == "a#b"  # no whitespace after it: a literal '#'


@pytest.mark.parametrize("line", ["WANDB_API_KEY=s3cr3t-value x", "WANDB_API_KEY s3cr3t-value",
                                  "WANDB_API_KEY='s3cr3t-value", "WANDB_API_KEY=$(s3cr3t-value)",
                                  "WANDB_API_KEY =s3cr3t-value", "WANDB_API_KEY=s3cr3t-value\x0c"])
def test_secret_lines_are_never_quoted(line: str) -> None:
    env = parse_env_text(line + "\n", "f", SECRETS)
    (err,) = env.errors
    assert "s3cr3t-value" not in err.message + err.fix and err.key == "WANDB_API_KEY"
    assert env.rejected and env.rejected[0][0] == "WANDB_API_KEY"


def test_duplicates_at_scale_are_linear() -> None:
    env = parse_env_text("".join(f"K{i % 50}={i}\n" for i in range(100_000)), "f")
    assert len(env.entries) == 50 and len(env.duplicates) == 100_000 - 50
    assert env.as_dict()["K0"].value == "99950"


def test_long_lines_are_clipped_in_messages() -> None:
    (err,) = parse_env_text("X " + "y" * 100_000 + "\n", "f").errors
    assert len(err.message) < 200


@pytest.mark.parametrize(("key", "bad", "good"), [
    ("PROXY_PORT", [0, 70000, -1], [1, 65535]), ("RAY_PORT", [0, 65536], [6379]),
    ("ROLLOUT_GPU_MEM", [0, 7, -0.1, math.nan, 1e-300], [0.05, 0.85, 1.0]),
    ("LR", [math.nan, math.inf, 2, 1e-320, 0.5, -1e-6], [1e-6, 1e-4, 0]),
    ("KL_LOSS_COEF", [-1, math.inf, 1e308], [0.0, 0.5]), ("MAX_SANDBOXES", [0, 2**31 - 1], [1, 64]),
    ("TRAIN_BSZ", [0, 10**40, 2**31 - 1], [2]), ("N_RESP", [0, 2**31 - 1], [8]), ("TOTAL_STEPS", [2**31 - 1], [0, 8]),
    ("VAL_N", [2**31 - 1], [1]), ("MAX_PROMPT", [2**31 - 1], [30000]), ("GPUS_PER_NODE", [2**30], [8]),
    ("NODE_WAIT_S", [0, 10**9], [600]), ("REPLICA_WAIT_S", [0], [3600]),
    ("N_NODES_ROLLOUT", [-1], [0]), ("TRAINER_SAVE_FREQ", [-2], [-1, 10]),
    ("OUTPUT_DIR", ["a\x00b", "x/" + "y" * 256, "a" * 5000], ["/tmp/out", "."]),
    ("EXP_NAME", ["e" * 129, "a\nb"], ["exp-1"]), ("RAY_HEAD_ADDRESS", ["h\u00e9ad", "a b", "-x"], ["", "10.0.0.1", "head-0"]),
    ("DOCKER_HOST", ["tcp://localhost:99999", "ftp://x", "unix://"], ["unix:///var/run/docker.sock", "tcp://h:2375"]),
    ("K8S_NAMESPACE", ["Bad_NS", "x" * 64], ["rl-sandboxes"]),
])
def test_key_ranges(key: str, bad: list, good: list) -> None:
    for value in bad:
        with pytest.raises(ValidationError):
            RunConfig(**{key: value})
    for value in good:
        RunConfig(**{key: value})


def test_every_int_float_and_text_key_has_a_range_in_the_docs() -> None:
    for name in KEYS:
        if FIELDS[name].annotation in (int, float, str):
            assert key_rule(name) is not None and ", " in type_name(name), name
    assert set(RULES) <= set(KEYS)
    assert type_name("PROXY_PORT") == "int, 1..65535" and type_name("ROLLOUT_GPU_MEM") == "float, [0.05, 1]"


def test_every_count_rate_coefficient_and_wait_has_an_upper_end_and_a_reason() -> None:
    """Issue 25: counts of 2,147,483,647, KL_LOSS_COEF=1e308, LR=1e-320 and waits of 0 were accepted."""
    for name in KEYS:
        if FIELDS[name].annotation in (int, float):
            rule = key_rule(name)
            assert rule.hi < 2**31 - 1 and math.isfinite(rule.hi) and rule.why, name
            if FIELDS[name].annotation is float:
                assert rule.lo > 0 or name == "KL_LOSS_COEF", name  # a rate of 1e-320 is no rate
    for wait in ("NODE_WAIT_S", "REPLICA_WAIT_S"):
        assert key_rule(wait).lo >= 1
