"""A warm start built in one clone is found by a fresh clone on the same machine, by content key only.

Unit tests: the teacher's recording and the fine-tune are stood in for (the slow docker tests in
test_sft_record.py build real ones); what is checked is which folder the model comes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlkit.train import _record, sft
from rlkit.train.sft import MARKER, SftSettings, ensure_sft_model

TASK = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "word-frequency"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Counts fine-tunes; each writes a model file whose text says which build it was."""
    done: list[Path] = []

    def fake_record(task_dirs: list[Path], base: Path, trials: Path, **_kw: Any) -> list:
        trials.mkdir(parents=True)
        (trials / "trial.log").write_text("teacher trial")
        return []

    def fake_finetune(records: list, base: Path, out: Path, settings: SftSettings, **_kw: Any) -> list[float]:
        done.append(out)
        (out / "model.safetensors").write_text(f"build {len(done)}")
        return [1.0, 0.5]

    monkeypatch.setattr(_record, "record_teacher", fake_record)
    monkeypatch.setattr(sft, "finetune", fake_finetune)
    return done


@pytest.fixture
def clone(tmp_path: Path) -> Any:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / TASK.name)

    def warm_start(name: str, shared: Path | None, **kw: Any) -> sft.SftResult:
        return ensure_sft_model(base, tasks, out_dir=tmp_path / name / "tiny-qwen3-sft", shared=shared,
                                val_fraction=0.0, log=lambda _m: None, **kw)

    return warm_start


def test_a_fresh_clone_copies_the_warm_start_another_clone_built(builds: list[Path], clone: Any,
                                                                  tmp_path: Path) -> None:
    shared = tmp_path / "cache" / "warm-starts"
    first = clone("clone-a", shared)
    assert not first.cached and len(builds) == 1
    kept = next(shared.iterdir())
    assert kept.name.startswith("sft-") and (kept / MARKER).is_file()
    assert not (kept / "trials").exists()  # the teacher's trial logs stay with the clone that ran them

    second = clone("clone-b", shared)
    assert second.cached and second.copied_from == kept and len(builds) == 1
    assert (second.model_dir / "model.safetensors").read_text() == "build 1"
    assert second.losses == first.losses == [1.0, 0.5]

    again = clone("clone-b", shared)  # now its own copy: nothing copied
    assert again.cached and again.copied_from is None


def test_other_settings_or_no_machine_cache_build_again(builds: list[Path], clone: Any, tmp_path: Path) -> None:
    shared = tmp_path / "cache" / "warm-starts"
    clone("clone-a", shared)
    other = clone("clone-b", shared, settings=SftSettings(target_replay=0.3))
    assert not other.cached and len(builds) == 2
    assert len(list(shared.iterdir())) == 2  # one per key
    alone = clone("clone-c", None)
    assert not alone.cached and alone.copied_from is None and len(builds) == 3


def test_a_half_written_copy_is_not_read(builds: list[Path], clone: Any, tmp_path: Path) -> None:
    """A copy without its marker (a killed writer) or with another key's marker is ignored and replaced."""
    shared = tmp_path / "cache" / "warm-starts"
    first = clone("clone-a", shared)
    kept = next(shared.iterdir())
    (kept / MARKER).write_text(json.dumps({"key": "another"}))
    second = clone("clone-b", shared)
    assert not second.cached and len(builds) == 2
    assert json.loads((kept / MARKER).read_text())["key"] == json.loads((first.model_dir / MARKER).read_text())["key"]


def test_a_clone_built_before_the_machine_cache_fills_it_on_its_next_call(builds: list[Path], clone: Any,
                                                                          tmp_path: Path) -> None:
    clone("clone-a", None)
    shared = tmp_path / "cache" / "warm-starts"
    again = clone("clone-a", shared)
    assert again.cached and again.copied_from is None and len(builds) == 1
    assert clone("clone-b", shared).copied_from == next(shared.iterdir()) and len(builds) == 1
