"""`rlkit eval` and `rlkit rollout --model-path` run the model-folder checks `rlkit check` runs (issue 48), with
the same readers and budgets: a FIFO or deeply nested config.json, a tokenizer.json linked out of the folder,
a chat template that loops are each a UserError naming the folder, before vLLM or the proxy starts."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

import rlkit
from rlkit.errors import UserError
from rlkit.validate.findings import Status
from rlkit.validate.model_folder import check_model_folder, require_model_folder

REPO = Path(__file__).resolve().parents[2]
LOOP_VERDICT = ('{"parser": "qwen3_coder", "ok": false, "parses": [], "timed_out": true, "budget_s": 20, '
                '"detail": "the chat template did not finish rendering within its 20 s budget"}\n')


def _bounded(fn, *args, **kwargs):
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(120)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"{fn} blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture
def model(tiny_model_dir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(tiny_model_dir, dest)
    return dest


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize(("case", "said"), [
    ("fifo_config", "FIFO"), ("deep_config", "nested"), ("tokenizer_link_out", "leads out of its folder"),
    ("config_link_out", "leads out of its folder"), ("fifo_template", "FIFO"),
])
def test_a_hostile_model_folder_is_a_user_error(model: Path, tmp_path: Path, case: str, said: str) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text('{"root": "SHADOW-CONTENT"}')
    if case == "fifo_config":
        _fifo(model / "config.json")
    elif case == "deep_config":
        (model / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    elif case == "tokenizer_link_out":
        (model / "tokenizer.json").unlink()
        (model / "tokenizer.json").symlink_to(shadow)
    elif case == "config_link_out":
        (model / "config.json").unlink()
        (model / "config.json").symlink_to(shadow)
    elif case == "fifo_template":
        _fifo(model / "chat_template.jinja")
    with pytest.raises(UserError) as err:
        _bounded(require_model_folder, model, "qwen3_coder", cache_dir=tmp_path / "cache",
                 probe_runner=lambda argv: pytest.fail("no probe on a folder that failed model_dir"))
    assert said in str(err.value) and "SHADOW" not in str(err.value) and err.value.file == str(model)


def test_a_looping_template_is_stopped_at_the_checks_budget(model: Path, tmp_path: Path) -> None:
    findings = check_model_folder(model, "qwen3_coder", cache_dir=tmp_path / "cache",
                                  probe_runner=lambda argv: LOOP_VERDICT)
    fatal = [f for f in findings if f.status is Status.FATAL]
    assert fatal and "rendering budget" in fatal[0].message
    with pytest.raises(UserError, match="rendering budget"):
        require_model_folder(model, "qwen3_coder", cache_dir=tmp_path / "cache", probe_runner=lambda argv: LOOP_VERDICT)


def test_a_hub_snapshot_whose_files_link_into_blobs_is_fine(model: Path, tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in model.iterdir():
        blob = repo / "blobs" / f"blob-{f.name}"
        shutil.copy(f, blob)
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    findings = check_model_folder(snapshot, "qwen3_coder", cache_dir=tmp_path / "cache",
                                  probe_runner=lambda argv: '{"parser": "qwen3_coder", "ok": true, "parses": []}\n')
    assert not [f for f in findings if f.status is Status.FATAL], findings


def test_eval_checks_the_model_folder_before_it_starts_anything(model: Path, tmp_path: Path) -> None:
    from rlkit.tasks.index import build_index

    index = tmp_path / "index.parquet"
    build_index(REPO / "examples" / "tasks" / "merge-intervals", index)
    _fifo(model / "config.json")
    with pytest.raises(UserError, match="FIFO"):
        _bounded(rlkit.eval, model, index, k=1, out=tmp_path / "out")
    with pytest.raises(UserError, match="FIFO"):
        _bounded(rlkit.rollout, index, model_path=str(model), k=1, out=tmp_path / "out2")
    assert not (tmp_path / "out" / "logs").exists()
