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


def test_a_tasks_dir_without_a_split_is_refused_and_a_split_keeps_val_tasks_out() -> None:
    """`rlkit sft --tasks DIR` with no --val-fraction taught the val tasks too; now it must name the
    split, and the split is `rlkit index build`'s (same fraction, same seed: the same val tasks)."""
    from rlkit.errors import UserError
    from rlkit.tasks.index import build_rows

    tasks = Path(__file__).resolve().parents[2] / "examples" / "tasks"
    with pytest.raises(UserError) as refused:
        sft.train_task_dirs(tasks)
    assert refused.value.key == "val_fraction" and "--val-fraction" in refused.value.fix
    taught = {d.name for d in sft.train_task_dirs(tasks, val_fraction=0.3)}
    val = {Path(r.task_source).name for r in build_rows(tasks, "val", val_fraction=0.3)}
    assert taught and val and not taught & val
    assert len(sft.train_task_dirs(tasks, val_fraction=0.0)) == 10


def test_the_machine_cache_is_passed_unless_turned_off(seen: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("RLKIT_CACHE_DIR", str(tmp_path / "cache"))
    assert sft_cli.main(["--model", "m", "--tasks", "t"]) == 0
    assert seen["shared"] == tmp_path / "cache" / "warm-starts"
    assert sft_cli.main(["--model", "m", "--tasks", "t", "--no-machine-cache"]) == 0
    assert seen["shared"] is None
