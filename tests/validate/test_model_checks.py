from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.validate.findings import Status


def fake_model(root: Path, *, config: dict | None = None, tokenizer: bool = True, template: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config or {"model_type": "qwen3", "max_position_embeddings": 4096,
                                                            "torch_dtype": "bfloat16"}))
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    if template:
        (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (root / "model.safetensors").write_bytes(b"\0" * 2048)
    return root


def kinds(report, check: str) -> list[Status]:
    return [f.status for f in report.by_check(check)]


def test_tiny_model_passes(ws) -> None:
    report = ws.preflight(ws.config(), only=["model_dir", "context_length", "model_engine"])
    assert [f.status for f in report.findings] == [Status.OK] * 3, report.render(block=False)


@pytest.mark.parametrize(("kind", "needle"), [
    ("missing", "does not exist"), ("file", "not a directory"), ("no_config", "no config.json"),
    ("no_tokenizer", "no tokenizer"), ("no_template", "no chat template"),
])
def test_model_dir_fatal(ws, tmp_path: Path, kind: str, needle: str) -> None:
    path = tmp_path / "m"
    if kind == "file":
        path.write_text("x")
    elif kind == "no_config":
        path.mkdir()
    elif kind == "no_tokenizer":
        fake_model(path, tokenizer=False)
    elif kind == "no_template":
        fake_model(path, template=False)
    report = ws.preflight(ws.config(MODEL_PATH=path), only=["model_dir", "context_length"])
    fatal = [f for f in report.by_check("model_dir") if f.status is Status.FATAL]
    assert len(fatal) == 1 and needle in fatal[0].message and fatal[0].fix and fatal[0].key == "MODEL_PATH"


def test_context_length(ws) -> None:
    report = ws.preflight(ws.config(MAX_PROMPT=30000, MAX_RESP=170000), only=["context_length"])
    (finding,) = report.by_check("context_length")
    assert finding.status is Status.FATAL and "40960" in finding.message and "MAX_RESP to 10960" in finding.fix


@pytest.mark.parametrize(("config", "engine", "status"), [
    ({"model_type": "qwen3_moe", "num_experts": 128, "max_position_embeddings": 8192}, "fsdp", Status.FATAL),
    ({"model_type": "qwen3_moe", "num_experts": 128, "max_position_embeddings": 8192}, "veomni", Status.OK),
    ({"model_type": "mixtral", "num_local_experts": 8, "max_position_embeddings": 8192}, "fsdp", Status.FATAL),
    ({"model_type": "x", "text_config": {"n_routed_experts": 64, "max_position_embeddings": 8192}}, "fsdp",
     Status.FATAL),
    ({"model_type": "qwen3", "max_position_embeddings": 8192}, "veomni", Status.WARN),
    ({"model_type": "qwen3", "max_position_embeddings": 8192}, "fsdp", Status.OK),
])
def test_model_engine_against_moe(ws, tmp_path: Path, config: dict, engine: str, status: Status) -> None:
    model = fake_model(tmp_path / "m", config=config)
    report = ws.preflight(ws.config(MODEL_PATH=model, MODEL_ENGINE=engine), only=["model_engine"])
    assert kinds(report, "model_engine") == [status]


def test_data_files_pass_and_fail(ws, tmp_path: Path) -> None:
    from tests.validate.helpers import write_index

    assert kinds(ws.preflight(ws.config(), only=["data_files"]), "data_files") == [Status.OK, Status.OK]
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("a,b\n1,2\n")
    empty = write_index(tmp_path / "empty.parquet", rows=0)
    missing_cols = write_index(tmp_path / "cols.parquet", drop=("image", "prompt"))
    cases = {tmp_path / "nope.parquet": "does not exist", not_parquet: "not a parquet file",
             empty: "has no rows", missing_cols: "lacks task-index column(s): image, prompt"}
    for path, needle in cases.items():
        report = ws.preflight(ws.config(TRAIN_FILES=path), only=["data_files"])
        train, val = report.by_check("data_files")
        assert train.status is Status.FATAL and needle in train.message and train.key == "TRAIN_FILES"
        assert val.status is Status.OK
