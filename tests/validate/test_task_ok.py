"""Preflight warns about index rows `rlkit tasks check --write-index` marked task_ok false."""

from __future__ import annotations

from pathlib import Path

from rlkit.rollout.task_check import TaskHealth, write_task_ok
from rlkit.validate._parquet_footer import read_footer, read_key_values
from rlkit.validate.findings import Status
from tests.validate.helpers import write_index


def test_task_ok_column_and_footer_verdicts(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    index = write_index(tmp_path / "train.parquet", rows=3)
    healths = [TaskHealth("task_id-0", "img"), TaskHealth("task_id-1", "img", problems=["oracle got reward 0"])]
    assert write_task_ok(index, healths) == 1
    assert pq.read_table(index).column("task_ok").to_pylist() == [True, False, None]  # row 2 was not checked
    assert read_footer(str(index))[1][-1] == "task_ok"
    assert '"task_id-1": "oracle got reward 0"' in read_key_values(str(index))["rlkit.task_check"]
    assert write_task_ok(index, healths[:1]) == 0  # checked again: replaced, not appended
    assert pq.read_table(index).column_names.count("task_ok") == 1


def test_preflight_warns_about_broken_tasks(ws, tmp_path: Path) -> None:
    assert [f.status for f in ws.preflight(ws.config(), only=["data_files"]).by_check("data_files")] == \
        [Status.OK, Status.OK]
    write_task_ok(ws.train, [TaskHealth("task_id-0", "img", problems=["image x failed: FROM python:3.12"]),
                             TaskHealth("task_id-1", "img")])
    findings = ws.preflight(ws.config(), only=["data_files"]).by_check("data_files")
    assert [f.status for f in findings] == [Status.OK, Status.WARN, Status.OK]
    warning = findings[1]
    assert warning.key == "TRAIN_FILES" and "1 task(s) failed `rlkit tasks check`" in warning.message
    assert "task_id-0: image x failed" in warning.message and "--write-index" in warning.fix
