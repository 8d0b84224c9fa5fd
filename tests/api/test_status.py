"""`rlkit.status` on recorded runs (tests/monitor/fixtures: the files of real embedded runs), by config with
overrides, by experiment name (the lock's recorded overrides apply), and `rlkit status --json` = its result."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import rlkit
from tests.api.conftest import REPO, as_json, cli_json

EMBEDDED = REPO / "examples" / "configs" / "embedded.env"


def without_ages(data: dict) -> dict:
    """A status without the ages of its readings (they grow between two calls)."""
    out = {k: v for k, v in data.items() if not k.endswith("age_s")}
    if isinstance(out.get("vllm"), dict):
        out["vllm"] = {k: v for k, v in out["vllm"].items() if k != "age_s"}
    return out


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_status_of_a_config_with_overrides(run_copy, capsys: pytest.CaptureFixture[str]) -> None:
    root = run_copy("healthy")
    keys = {"EXP_NAME": "fx-healthy", "OUTPUT_DIR": str(root), "TOTAL_STEPS": 2}
    status = rlkit.status(EMBEDDED, **keys)
    assert status.ref.paths.root == root and status.ref.total_steps == 2
    assert status.live.state == "finished" and (status.first_step, status.last_step) == (1, 2)
    early, reward, _ = status.numbers
    assert "0 parse_error" in early.value and "mean 1.000, pass rate 100%" in reward.value
    assert without_ages(rlkit.status(rlkit.resolve(EMBEDDED, **keys)).as_dict()) == without_ages(status.as_dict())
    code, data = cli_json(capsys, "status", str(EMBEDDED), *(a for k, v in keys.items() for a in ("--set", f"{k}={v}")))
    assert code == 0 and without_ages(data) == without_ages(as_json(status))


def test_status_by_experiment_name_uses_the_overrides_its_lock_recorded(run_copy,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = run_copy("healthy")
    lock = {"pid": _dead_pid(), "host": socket.gethostname(), "project": "embedded", "exp": "fx-healthy",
            "config": str(EMBEDDED), "overrides": {"EXP_NAME": "fx-healthy", "OUTPUT_DIR": str(root),
                                                   "TOTAL_STEPS": "2"}}
    (root / "logs" / "fx-healthy.lock").write_text(json.dumps(lock))
    status = rlkit.status("fx-healthy", root=root)
    assert status.ref.config_path == EMBEDDED and status.ref.total_steps == 2  # the file says 8
    assert status.live.state == "stale-lock" and not status.live.alive and status.last_step == 2
    code, data = cli_json(capsys, "status", "fx-healthy", "--root", str(root))
    assert code == 0 and without_ages(data) == without_ages(as_json(status))


def test_status_of_no_such_run_is_a_user_error(tmp_path: Path) -> None:
    from rlkit.errors import UserError

    with pytest.raises(UserError) as missing:
        rlkit.status("nope", root=tmp_path)
    assert "no run 'nope'" in missing.value.message and missing.value.fix
