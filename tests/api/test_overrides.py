"""Overrides without a file: keyword arguments (and `--set`) resolve as run config lines would, on top of
every layer, and every value says which layer it came from. Errors are rlkit's typed errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rlkit
from rlkit.config.schema import Layer
from rlkit.errors import ConfigError, PreflightFailed
from tests.api.conftest import REPO, cli_json
from tests.validate.helpers import Workspace


def test_an_override_is_the_top_layer_and_says_so(ws: Workspace) -> None:
    config = ws.config(TRAIN_BSZ=4, MINI_BSZ="${TRAIN_BSZ}")
    resolved = rlkit.resolve(config, TRAIN_BSZ=8, N_RESP="${TRAIN_BSZ}", SCAFFOLD="cc")
    c = resolved.config
    assert (c.TRAIN_BSZ, c.MINI_BSZ, c.N_RESP) == (8, 8, 8)  # ${KEY} expands across layers, to the override
    assert resolved.layer("TRAIN_BSZ") is Layer.OVERRIDE and resolved.where("TRAIN_BSZ") == "override"
    assert resolved.layer("MINI_BSZ") is Layer.RUN and resolved.where("MINI_BSZ") == f"{config}:19"
    assert resolved.layer("RAY_PORT") is Layer.SITE and resolved.layer("LR") is Layer.DEFAULT
    # an axis key picks its module as the run config's would: cc's module sets the agent and its API
    assert (c.HARBOR_AGENT, c.AGENT_API.value) == ("claude-code", "anthropic")
    assert resolved.where("HARBOR_AGENT") == "scripts/templates/scaffold/cc.env:2"
    # the process environment is below the overrides
    env = {**ws.environ(), "DRY_RUN": "1"}
    assert rlkit.resolve(config, environ=env).config.DRY_RUN is True
    assert rlkit.resolve(config, environ=env, DRY_RUN=False).config.DRY_RUN is False
    # a resolved config takes more overrides on top of its own
    again = rlkit.resolve(resolved, N_RESP=2)
    assert (again.config.TRAIN_BSZ, again.config.N_RESP) == (8, 2) and again.overrides["SCAFFOLD"] == "cc"
    secret = rlkit.resolve(again, WANDB_API_KEY="wk-0123456789abcdef")
    assert secret.secret_overrides() == {"WANDB_API_KEY": "wk-0123456789abcdef"}
    assert "WANDB_API_KEY" not in secret.public_overrides()  # what a run lock or a command line may carry
    assert "0123456789ab" not in json.dumps(secret.as_dict())
    data = json.loads(json.dumps(again.as_dict()))
    assert data["values"]["N_RESP"] == {"value": "2", "layer": "override", "where": "override"}
    assert data["values"]["TRAIN_BSZ"]["value"] == "8" and data["overrides"] == ["N_RESP", "SCAFFOLD", "TRAIN_BSZ"]


def test_overrides_are_checked_as_a_file_line_would_be(ws: Workspace) -> None:
    report = rlkit.check(ws.config(), only=["config_syntax", "unknown_key", "key_layer", "types", "changeme"],
                         TRAIN_BZS=8, N_RESP="two", LR="$(rm -rf /)", RAY_PORT=7000, EXP_NAME="CHANGEME",
                         WANDB_API_KEY="`secret-value-123`")
    shown = {f.check: f for f in report.findings if f.status.value != "ok"}
    assert shown["unknown_key"].message == "unknown key TRAIN_BZS in the override layer"
    assert shown["unknown_key"].fix == "did you mean TRAIN_BSZ?"
    assert shown["types"].key == "N_RESP" and shown["types"].where == "override"
    syntax = [f for f in report.findings if f.check == "config_syntax"]
    assert {f.key for f in syntax} == {"LR", "WANDB_API_KEY"}
    assert all(f.status.value == "fatal" and f.where == "override" for f in syntax)
    assert "command substitution" in next(f.message for f in syntax if f.key == "LR")
    assert "secret-value" not in report.render()  # a secret's value is never quoted
    assert shown["key_layer"].message == "RAY_PORT belongs to the site layer, but is set in the override layer"
    assert shown["changeme"].key == "EXP_NAME"
    assert not report.ok


def test_errors_are_typed(ws: Workspace) -> None:
    with pytest.raises(ConfigError) as missing:
        rlkit.check(ws.root / "nope.env")
    assert missing.value.file == str(ws.root / "nope.env") and missing.value.fix
    with pytest.raises(TypeError, match="config keys are upper case"):
        rlkit.check(ws.config(), train_bsz=8)
    with pytest.raises(PreflightFailed) as refused:  # nothing trains on a FATAL finding
        rlkit.train(ws.config(), NNODES=5, DRY_RUN=1)
    err = refused.value
    assert err.key == "NNODES" and err.file == "override" and "NNODES" in err.fix
    assert err.message.startswith("topology: NNODES=5") and not err.report.ok


def test_set_on_the_command_line_is_the_same_layer(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    config = ws.config()
    code, data = cli_json(capsys, "check", str(config), "--set", "TRAIN_BSZ=8", "--set", "MINI_BSZ=4")
    report = rlkit.check(config, TRAIN_BSZ=8, MINI_BSZ=4)
    assert data == json.loads(json.dumps(report.as_dict())) and code == (0 if report.ok else 1)
    assert data["values"]["TRAIN_BSZ"] == {"value": "8", "layer": "override", "where": "override"}
    proc = subprocess.run([sys.executable, "-m", "rlkit", "check", str(config), "--set", "TRAIN_BSZ=8"],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert "TRAIN_BSZ" in proc.stdout and "= 8" in proc.stdout.split("TRAIN_BSZ", 1)[1].splitlines()[0]
    assert "[override]" in proc.stdout.split("TRAIN_BSZ", 1)[1].splitlines()[0]
    bad = subprocess.run([sys.executable, "-m", "rlkit", "check", str(config), "--set", "TRAIN_BSZ"],
                         capture_output=True, text=True, cwd=REPO, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("✗ FATAL [--set] --set 'TRAIN_BSZ' is not KEY=VALUE")
    assert "Traceback" not in bad.stderr


def test_import_rlkit_loads_only_the_api_module() -> None:
    code = "import sys, rlkit; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('rlkit', 'pydantic', 'rich', 'psutil'))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert proc.stdout.split() == ["rlkit", "rlkit.api", "rlkit.api._inputs"]
    assert callable(rlkit.train) and rlkit.train.__doc__ and Path(rlkit.__file__).parent == REPO / "rlkit"


def test_train_and_rollout_are_functions_and_still_reach_their_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    from hydra.utils import get_class

    import rlkit.train.local as trainer_module  # a subpackage named like the API function
    from rlkit.rollout import passes

    assert rlkit.train.local is trainer_module and rlkit.rollout.passes is passes
    assert callable(rlkit.train) and callable(rlkit.rollout)  # importing the packages left the functions
    assert "on_preflight" in inspect.signature(rlkit.train).parameters and rlkit.train.__doc__.startswith("Train")
    assert get_class("rlkit.train.verl_agent_loop.RlkitAgentLoop").__name__ == "RlkitAgentLoop"  # verl's _target_
    monkeypatch.setattr("rlkit.rollout.passes.RESULTS_FILE", "other.jsonl")
    assert passes.RESULTS_FILE == "other.jsonl"
    with pytest.raises(AttributeError):
        rlkit.train.no_such_module  # noqa: B018
