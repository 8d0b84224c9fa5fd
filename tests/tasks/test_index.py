from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.errors import UserError
from rlkit.tasks.index import build_index, build_rows, load_index, write_index
from rlkit.tasks.schema import AGENT_LOOP_NAME, ALL_COLUMNS, REQUIRED_COLUMNS
from tests.tasks.conftest import EXAMPLES


def test_index_has_exactly_the_schema_columns(tmp_path: Path):
    out = tmp_path / "train.parquet"
    rows = build_index(EXAMPLES, out)
    table = pq.read_table(out)
    assert set(table.column_names) == set(ALL_COLUMNS)
    assert table.num_rows == len(rows) == len(list(EXAMPLES.glob("*/task.toml")))


def test_rows_point_at_tasks_and_images(tmp_path: Path):
    out = tmp_path / "i.parquet"
    build_index(EXAMPLES, out, registry="reg.example:5000/team")
    record = pq.read_table(out).to_pylist()[0]
    task_dir = Path(record["task_source"])
    assert (task_dir / "task.toml").is_file()
    assert record["image"] == f"reg.example:5000/team/rlkit-task/{task_dir.name}:latest"
    assert record["split"] == "train" and record["difficulty"] in {"easy", "medium", "hard"}
    assert record["agent_timeout_sec"] == 600.0 and record["verifier_timeout_sec"] == 120.0


def test_verl_columns(tmp_path: Path):
    out = tmp_path / "i.parquet"
    build_index(EXAMPLES, out, data_source="bundled")
    records = pq.read_table(out).to_pylist()
    for i, record in enumerate(records):
        instruction = (Path(record["task_source"]) / "instruction.md").read_text()
        assert record["prompt"] == [{"role": "user", "content": instruction}]
        assert record["agent_name"] == AGENT_LOOP_NAME
        assert record["data_source"] == "bundled"
        assert record["reward_model"] == {"style": "rule", "ground_truth": ""}
        assert record["extra_info"] == {"task_id": record["task_id"], "index": i, "split": "train"}


def test_load_round_trip(tmp_path: Path):
    out = tmp_path / "i.parquet"
    built = build_index(EXAMPLES, out)
    loaded = load_index(out)
    assert [r.task_id for r in loaded] == [r.task_id for r in built]
    assert loaded[0].instruction == built[0].instruction
    assert loaded == built


def test_val_split_is_seeded_and_complementary():
    train = {r.task_id for r in build_rows(EXAMPLES, "train", val_fraction=0.3, seed=7)}
    val = {r.task_id for r in build_rows(EXAMPLES, "val", val_fraction=0.3, seed=7)}
    assert train and val and not train & val
    assert len(train | val) == len(list(EXAMPLES.glob("*/task.toml")))
    assert len(val) == 3
    assert val == {r.task_id for r in build_rows(EXAMPLES, "val", val_fraction=0.3, seed=7)}
    other_seeds = [{r.task_id for r in build_rows(EXAMPLES, "val", val_fraction=0.3, seed=s)} for s in range(5)]
    assert any(v != val for v in other_seeds)
    assert all(r.split == "val" for r in build_rows(EXAMPLES, "val", val_fraction=0.3, seed=7))


def test_bad_val_fraction():
    with pytest.raises(UserError, match="val-fraction"):
        build_rows(EXAMPLES, "train", val_fraction=1.0)


def _write_table(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _valid_record() -> dict:
    return {"task_id": "t", "task_source": "/x", "image": "img:1", "split": "train", "data_source": "d",
            "prompt": [{"role": "user", "content": "hi"}], "agent_name": AGENT_LOOP_NAME,
            "reward_model": {"style": "rule", "ground_truth": ""}, "extra_info": {"task_id": "t", "index": 0}}


def test_load_minimal_index_without_optional_columns(tmp_path: Path):
    rows = load_index(_write_table(tmp_path / "m.parquet", [_valid_record()]))
    assert rows[0].task_id == "t" and rows[0].instruction == "hi" and rows[0].pass_rate is None


@pytest.mark.parametrize("change, key", [
    ({"split": "training"}, "split"),
    ({"pass_rate": 2.0}, "pass_rate"),
    ({"image": ""}, "image"),
])
def test_load_rejects_bad_values(tmp_path: Path, change, key):
    path = _write_table(tmp_path / "bad.parquet", [{**_valid_record(), **change}])
    with pytest.raises(UserError) as info:
        load_index(path)
    assert info.value.key == key and info.value.file == str(path) and "row 0" in info.value.message


def test_load_rejects_missing_columns_and_duplicates(tmp_path: Path):
    record = _valid_record()
    del record["image"]
    with pytest.raises(UserError, match="lacks column") as info:
        load_index(_write_table(tmp_path / "a.parquet", [record]))
    assert info.value.key == "image"
    with pytest.raises(UserError, match="appears twice"):
        load_index(_write_table(tmp_path / "b.parquet", [_valid_record(), _valid_record()]))
    with pytest.raises(UserError, match="does not exist"):
        load_index(tmp_path / "missing.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="not a readable parquet"):
        load_index(tmp_path / "junk.parquet")


def test_required_columns_come_from_schema():
    # write_index must never drift from the one column list in schema.py
    from rlkit.tasks.index import _arrow_schema

    assert set(_arrow_schema().names) == set(ALL_COLUMNS)
    assert set(REQUIRED_COLUMNS) <= set(ALL_COLUMNS)


def test_write_index_creates_parent_dirs(tmp_path: Path):
    rows = build_rows(EXAMPLES)
    out = write_index(rows[:2], tmp_path / "deep" / "dir" / "i.parquet")
    assert len(load_index(out)) == 2


def test_cli_build_and_show(tmp_path: Path, capsys):
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    assert rlkit_main(["index", "build", str(EXAMPLES), "-o", str(train), "--val-fraction", "0.2",
                       "--seed", "1", "--split", "train"]) == 0
    assert rlkit_main(["index", "build", str(EXAMPLES), "-o", str(val), "--val-fraction", "0.2",
                       "--seed", "1", "--split", "val"]) == 0
    assert "✓ wrote 8 train task(s)" in capsys.readouterr().out
    assert rlkit_main(["index", "show", str(val)]) == 0
    shown = capsys.readouterr().out
    assert "✓ 2 row(s)" in shown and "rlkit-task/" in shown


def test_cli_build_writes_both_parts_of_a_split_at_once(tmp_path: Path, capsys):
    one, both_train, both_val = tmp_path / "one.parquet", tmp_path / "train.parquet", tmp_path / "val.parquet"
    assert rlkit_main(["index", "build", str(EXAMPLES), "-o", str(one), "--val-fraction", "0.3",
                       "--split", "val"]) == 0
    assert rlkit_main(["index", "build", str(EXAMPLES), "-o", str(both_train), "--val-fraction", "0.3",
                       "--val-output", str(both_val)]) == 0
    out = capsys.readouterr().out
    assert "✓ wrote 7 train task(s)" in out and "✓ wrote 3 val task(s)" in out
    val_ids = [r.task_id for r in load_index(both_val)]
    assert val_ids == [r.task_id for r in load_index(one)]  # the same split as --split val alone
    assert not set(val_ids) & {r.task_id for r in load_index(both_train)}
    assert {r.split for r in load_index(both_val)} == {"val"}

    assert rlkit_main(["index", "build", str(EXAMPLES), "-o", str(one), "--val-output", str(both_val)]) == 2
    assert "--val-fraction" in capsys.readouterr().err


def test_cli_user_error_is_fatal_line_not_traceback(tmp_path: Path, capsys):
    assert rlkit_main(["index", "build", str(tmp_path / "nope"), "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("✗ FATAL") and "Traceback" not in err


@pytest.mark.slow
def test_verl_rlhf_dataset_loads_the_index(tmp_path: Path, tiny_model_dir: Path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out = tmp_path / "train.parquet"
    build_index(EXAMPLES, out)
    dataset = RLHFDataset(str(out), AutoTokenizer.from_pretrained(tiny_model_dir),
                          OmegaConf.create({"max_prompt_length": 8192, "return_raw_chat": True,
                                            "cache_dir": str(tmp_path / "cache")}))
    assert len(dataset) == len(list(EXAMPLES.glob("*/task.toml")))
    item = dataset[0]
    assert item["agent_name"] == AGENT_LOOP_NAME
    assert item["raw_prompt"][0]["role"] == "user"
    assert item["extra_info"]["task_id"] == item["task_id"]
