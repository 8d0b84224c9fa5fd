"""`rlkit tasks check`: healthy bundled tasks, and a copy with a broken solution and an unbuildable image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit_main
from tests.rollout.conftest import EXAMPLES

pytestmark = pytest.mark.docker


@pytest.mark.slow
def test_every_bundled_task_is_healthy(task_images, capsys):
    assert rlkit_main(["tasks", "check", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "10 healthy, 0 broken (of 10 tasks)" in out


def test_a_broken_solution_and_an_unpullable_base_are_named(task_images, tmp_path: Path, capsys):
    tasks = tmp_path / "tasks"
    for name in ("median-even-length", "merge-intervals", "word-frequency"):
        shutil.copytree(EXAMPLES / name, tasks / name)
    (tasks / "merge-intervals" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    dockerfile = tasks / "word-frequency" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("FROM rlkit/base:bookworm", "FROM python:3.12-slim"))
    index = tmp_path / "train.parquet"
    assert rlkit_main(["index", "build", str(tasks), "-o", str(index)]) == 0
    capsys.readouterr()

    assert rlkit_main(["tasks", "check", str(index), "--write-index", "--concurrency", "3"]) == 1
    out = capsys.readouterr().out
    assert "✓ median-even-length" in out
    assert "✗ merge-intervals" in out and "oracle got reward 0, not 1: the reference solution does not pass" in out
    assert "✗ word-frequency" in out and "hint: the Dockerfile's base image (python:3.12-slim)" in out
    assert "1 healthy, 2 broken (of 3 tasks)" in out

    import pyarrow.parquet as pq

    table = pq.read_table(index).select(["task_id", "task_ok"]).to_pylist()
    assert {r["task_id"]: r["task_ok"] for r in table} == {"median-even-length": True, "merge-intervals": False,
                                                          "word-frequency": False}
    # --write-index needs an index
    assert rlkit_main(["tasks", "check", str(tasks), "--write-index"]) == 2
    assert "--write-index needs a task index" in capsys.readouterr().err
