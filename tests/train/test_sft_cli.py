"""`rlkit sft` flags reach the warm start's settings; with none, the settings (and so the cache key) are the defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlkit.cli import sft as sft_cli
from rlkit.train import sft
from rlkit.train.sft import SftResult, SftSettings


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    calls: dict[str, Any] = {}

    def fake_ensure(model: str, tasks: str, **kwargs: Any) -> SftResult:  # unit test: no recording, no fine-tune
        calls.update(kwargs, model=model, tasks=tasks)
        return SftResult(model_dir=tmp_path, cached=True)

    monkeypatch.setattr(sft, "ensure_sft_model", fake_ensure)
    return calls


def test_no_flags_keep_the_default_settings(seen: dict[str, Any]) -> None:
    assert sft_cli.main(["--model", "m", "--tasks", "t"]) == 0
    assert seen["settings"] == SftSettings()


def test_flags_reach_the_settings(seen: dict[str, Any]) -> None:
    assert sft_cli.main(["--model", "m", "--tasks", "t", "--scaffold", "oc", "--target-replay", "0.3",
                         "--teacher-samples", "2", "--max-prompt", "10240", "--max-response", "2048"]) == 0
    assert seen["settings"] == SftSettings(scaffold="oc", target_replay=0.3, teacher_samples=2, max_prompt=10240,
                                           max_response=2048)
