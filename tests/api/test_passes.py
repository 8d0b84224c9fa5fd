"""`rlkit.rollout`, `rlkit.eval` and `rlkit.tasks_check` on bundled tasks in real docker sandboxes (the
reference agents: the model through vLLM is test_readme_example's), and each command's --json = the result."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import rlkit
from tests.api.conftest import EXAMPLES, TASKS, as_json, cli_json
from tests.validate.helpers import Workspace

pytestmark = pytest.mark.docker


def test_rollout(task_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlkit.tasks.index import load_index

    out = tmp_path / "rollout"
    seen: list[tuple[int, int]] = []
    result = rlkit.rollout(task_index, agent="oracle", k=1, out=out, inclusive=True,
                           progress=lambda totals, total: seen.append((totals["attempts"], total)))
    assert result.tasks == dict.fromkeys(TASKS, 1.0) and result.totals["passed"] == 2
    assert seen[0] == (0, 2) and seen[-1] == (2, 2)
    assert [r.pass_rate for r in load_index(result.pass_rates)] == [1.0, 1.0]
    assert result.filtered == out / "two.filtered.parquet" and result.kept == TASKS
    assert (out / "harbor_trials" / "rollout" / "two" / "step_0" / "summary.json").is_file()
    # the same pass again resumes (nothing left to run); the CLI prints the same result
    code, data = cli_json(capsys, "rollout", str(task_index), "--agent", "oracle", "-k", "1", "-o", str(out),
                          "--inclusive")
    assert code == 0 and data == as_json(result)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    # the default window (0 < p < 1) holds no task: no filtered index, and the result says so
    narrow = rlkit.rollout(task_index, agent="oracle", k=1, out=out)
    assert narrow.filtered is None and narrow.kept == [] and narrow.window_text() == "(0, 1)"


def test_eval_with_a_run_configs_settings(task_index: Path, ws: Workspace, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = ws.config(PROJECT_NAME="evalproj", MAX_SANDBOXES=1)
    out = tmp_path / "eval"
    result = rlkit.eval("unused-model-dir", task_index, agent="oracle", k=2, out=out, config=config, MAX_RESP=512)
    assert result.overall == {"pass@1": 1.0, "pass@2": 1.0} and set(result.tasks) == set(TASKS)
    assert all(t["n"] == 2 and t["c"] == 2 for t in result.tasks.values())
    assert result.path == out / "eval_results.json"
    assert (out / "harbor_trials" / "evalproj" / "eval-two" / "step_0").is_dir()  # PROJECT_NAME from the config
    code, data = cli_json(capsys, "eval", "unused-model-dir", str(task_index), "--agent", "oracle", "-k", "2",
                          "-o", str(out), "--config", str(config), "--set", "MAX_RESP=512")
    assert code == 0 and data == as_json(result)
    import docker

    # every trial's sandbox and grading container went with it (a leak here once left one trial's pair)
    left = docker.from_env().containers.list(all=True, filters={"label": "rlkit.project=evalproj"})
    assert [c.name for c in left] == []
    with pytest.raises(TypeError, match="max_sandbox"):
        rlkit.eval("m", task_index, agent="oracle", max_sandbox=2)


def test_tasks_check(base_image: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks"
    for name in TASKS:
        shutil.copytree(EXAMPLES / name, tasks / name)
    (tasks / "merge-intervals" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    from rlkit.tasks.index import build_rows, write_index

    index = write_index(build_rows(tasks, "train"), tmp_path / "tasks.parquet")
    steps: list[tuple[int, int]] = []
    result = rlkit.tasks_check(index, write_index=True, progress=lambda done, total, *_: steps.append((done, total)))
    verdicts = {h.task_id: h for h in result.tasks}
    assert verdicts["calc-power-unary"].ok and not result.ok and [h.task_id for h in result.broken] == [
        "merge-intervals"]
    assert verdicts["merge-intervals"].problems == [
        "oracle got reward 0, not 1: the reference solution does not pass (failed_tests)"]
    assert steps[-1] == (6, 6) and result.wrote_index
    import pyarrow.parquet as pq

    assert pq.read_table(index, columns=["task_id", "task_ok"]).to_pylist() == [
        {"task_id": "calc-power-unary", "task_ok": True}, {"task_id": "merge-intervals", "task_ok": False}]
    code, data = cli_json(capsys, "tasks", "check", str(index))
    assert code == 1 and data == {**as_json(result), "wrote_index": False}
    assert data["tasks"][1]["oracle_reward"] == 0.0 and data["tasks"][1]["nop_reward"] == 0.0
