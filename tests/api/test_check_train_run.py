"""`rlkit.check`, `rlkit.train` (its preflight and DRY_RUN paths; the 2-step run is test_readme_example)
and `rlkit.run`, against the real docker daemon, and `rlkit check|train|run --json` = the API's result."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from pathlib import Path

import psutil
import pytest

import rlkit
from rlkit.config.schema import Layer
from rlkit.errors import PreflightFailed
from tests.api.conftest import as_json, cli_json
from tests.validate.helpers import Workspace

pytestmark = pytest.mark.docker


def test_check(docker_ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    config = docker_ws.config()
    report = rlkit.check(config, TRAIN_BSZ=2, MINI_BSZ=1, context=True)
    assert report.ok, report.render()
    assert {f.check for f in report.findings} >= {"backend", "batch", "run_in_flight", "gpu_ownership"}
    assert report.resolved.layer("TRAIN_BSZ") is Layer.OVERRIDE and report.resolved.config.TRAIN_BSZ == 2
    code, data = cli_json(capsys, "check", str(config), "--context", "--set", "TRAIN_BSZ=2", "--set", "MINI_BSZ=1")
    assert code == 0 and data == as_json(report)
    assert data["counts"]["fatal"] == 0 and data["values"]["MINI_BSZ"]["layer"] == "override"


def test_train_preflight_only_and_dry_run(docker_ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    config = docker_ws.config(TRAINER="local")
    checked = rlkit.train(config, PREFLIGHT_ONLY=1)
    assert checked.action == "preflight" and checked.report.ok and checked.dry_run is None
    assert checked.paths.exp == "exp" and checked.paths.root == docker_ws.root / "out"
    code, data = cli_json(capsys, "train", str(config), "--set", "PREFLIGHT_ONLY=1")
    assert code == 0 and data == as_json(checked)

    planned = rlkit.train(config, DRY_RUN=1, EXP_NAME="planned")
    assert planned.action == "dry_run" and planned.report.ok
    assert "TRAINER=local" in planned.dry_run and "vllm.entrypoints.openai.api_server" in planned.dry_run
    assert f"{docker_ws.root / 'out' / 'logs' / 'planned.log'}" in planned.dry_run
    assert not (docker_ws.root / "out" / "logs" / "planned.lock").exists()  # nothing was launched
    code, data = cli_json(capsys, "train", str(config), "--set", "DRY_RUN=1", "--set", "EXP_NAME=planned")
    free_port = re.compile(r"(--port |127\.0\.0\.1:)\d+")  # vLLM's port is picked free for each plan
    assert code == 0 and free_port.sub(r"\1N", data.pop("dry_run")) == free_port.sub(r"\1N", planned.dry_run)
    expected = as_json(planned)
    expected.pop("dry_run")
    assert data == expected


def _stand_in_train_sh(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> Path:
    """scripts/train/train.sh replaced by a script that records its arguments and waits: a real training
    run is test_readme_example's."""
    from rlkit.launch import background

    script = ws.root / "scripts" / "train" / "train.sh"
    script.parent.mkdir(parents=True)
    script.write_text('echo "training $*"; echo "wandb key of ${#WANDB_API_KEY} characters"; sleep 30\n')
    monkeypatch.setattr(background, "REPO_ROOT", ws.root)
    return script


def _wait_for(path: Path, text: str) -> str:
    for _ in range(600):  # a loaded machine takes a while to get through nohup and setsid to bash
        if path.is_file() and text in path.read_text():
            break
        time.sleep(0.05)
    return path.read_text()


def test_run_starts_a_stand_in_train_sh_detached(docker_ws: Workspace, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The trainer is a stand-in train.sh (it only records its arguments); the checks and the detached
    start are real."""
    _stand_in_train_sh(docker_ws, monkeypatch)
    config = docker_ws.config()
    secret = "wk-secret-value-12345"
    handle = rlkit.run(config, TOTAL_STEPS=3, EXP_NAME="bg", WANDB_API_KEY=secret)
    try:
        logs = docker_ws.root / "out" / "logs"
        assert handle.log == logs / f"train_{dt.datetime.now():%m%d}.out" and handle.lock == logs / "bg.lock"
        assert (handle.project, handle.exp, handle.overrides) == ("proj", "bg", {"TOTAL_STEPS": "3", "EXP_NAME": "bg"})
        # the overrides travel to the run, so it resolves the same values
        line = _wait_for(handle.log, "wandb key")
        assert f"training {config.resolve()} --set TOTAL_STEPS=3 --set EXP_NAME=bg\n" in line
        # a secret goes to the run in its environment: never on its command line or in the handle
        assert f"wandb key of {len(secret)} characters" in line and secret not in str(handle.as_dict())
        assert handle.alive() and os.getsid(handle.pid) == handle.pid  # its own session
        assert handle.lock_info() is None  # the stand-in takes no lock
        status = rlkit.status(handle)
        assert status.ref.paths.exp == "bg" and status.ref.total_steps == 3
        handle.stop()
        assert handle.wait(10) is not None and not handle.alive()

        code, data = cli_json(capsys, "run", str(config), "--set", "TOTAL_STEPS=3", "--set", "EXP_NAME=bg")
        assert code == 0 and psutil.pid_exists(data["pid"])
        psutil.Process(data["pid"]).kill()
        assert {**data, "pid": handle.pid} == as_json(handle)  # a second start differs only in its pid
    finally:
        handle.stop()


def test_run_refuses_on_a_fatal_finding(docker_ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _stand_in_train_sh(docker_ws, monkeypatch)
    with pytest.raises(PreflightFailed) as refused:
        rlkit.run(docker_ws.config(), NNODES=3)
    assert refused.value.key == "NNODES" and refused.value.report.fatal
    assert not (docker_ws.root / "out" / "logs").exists() and script.is_file()
