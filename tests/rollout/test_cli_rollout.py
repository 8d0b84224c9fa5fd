"""`rlkit rollout` and `rlkit eval` on the bundled tasks: pass rates, filtered indexes preflight accepts, pass@k."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlkit.cli.main import main as rlkit_main
from tests.rollout.conftest import EXAMPLES, ROOT

EMBEDDED = ROOT / "examples" / "configs" / "embedded.env"
TASKS = ["calc-power-unary", "merge-intervals", "word-frequency"]


def _index(path: Path, tasks: list[str]) -> Path:
    from rlkit.tasks.index import build_rows, write_index

    return write_index([r for r in build_rows(EXAMPLES, "train") if r.task_id in tasks], path)


def _train_files_finding(filtered: Path):
    from rlkit.validate.preflight import run_preflight

    # TRAIN_FILES is a run key (the process env cannot override it): the embedded config, pointed at `filtered`
    # (TRAIN_BSZ=MINI_BSZ=1: a filtered index may hold fewer tasks than the embedded default's prompts a step)
    lines = [line for line in EMBEDDED.read_text().splitlines()
             if not line.startswith(("TRAIN_FILES=", "VAL_FILES=", "TRAIN_BSZ=", "MINI_BSZ="))]
    config = filtered.with_name("run.env")
    config.write_text("\n".join([*lines, f"TRAIN_FILES={filtered}", f"VAL_FILES={filtered}", "TRAIN_BSZ=1",
                                 "MINI_BSZ=1", ""]))
    report = run_preflight(config, only=["data_files"])
    [finding] = [f for f in report.findings if "TRAIN_FILES" in f.message]
    return finding


@pytest.mark.docker
def test_oracle_rollout_writes_pass_rates_and_a_filtered_index_check_accepts(task_images, tmp_path: Path,
                                                                             capsys) -> None:
    from rlkit.tasks.index import load_index
    from rlkit.validate.findings import Status

    index = _index(tmp_path / "bundled.parquet", TASKS)
    out = tmp_path / "out"
    code = rlkit_main(["rollout", str(index), "--agent", "oracle", "-k", "1", "--inclusive", "-o", str(out)])
    assert code == 0, capsys.readouterr()
    rated = load_index(out / "bundled.pass_rates.parquet")
    assert {r.task_id: r.pass_rate for r in rated} == dict.fromkeys(TASKS, 1.0)
    filtered = out / "bundled.filtered.parquet"
    assert [r.task_id for r in load_index(filtered)] == [r.task_id for r in rated]
    finding = _train_files_finding(filtered)
    assert finding.status is Status.OK, finding.render()
    assert len((out / "results.jsonl").read_text().splitlines()) == 3
    assert (out / "harbor_trials" / "rollout" / "bundled" / "step_0" / "summary.json").is_file()

    # Run again with the default window (0 < p < 1): the pass resumes (nothing left to run),
    # and no task is in the window, so no filtered index is written.
    filtered.unlink()
    assert rlkit_main(["rollout", str(index), "--agent", "oracle", "-k", "1", "-o", str(out)]) == 1
    assert "no task has a pass rate in (0, 1)" in capsys.readouterr().out
    assert len((out / "results.jsonl").read_text().splitlines()) == 3 and not filtered.exists()


@pytest.mark.docker
@pytest.mark.vllm
@pytest.mark.slow
def test_model_rollout_and_eval(task_images, tiny_model_dir: Path, vllm_server: Any, tmp_path: Path) -> None:
    from rlkit.tasks.index import load_index
    from rlkit.validate.findings import Status

    index = _index(tmp_path / "two.parquet", TASKS[:2])
    model = ["--upstream", vllm_server.base_url, "--served-model-name", vllm_server.model_name,
             "--max-turns", "2", "--max-call-tokens", "48", "-k", "2"]
    out = tmp_path / "rollout"
    code = rlkit_main(["rollout", str(index), "--model-path", str(tiny_model_dir), *model, "-o", str(out),
                       "--max-pass-rate", "0.5", "--inclusive"])
    assert code == 0
    filtered = out / "two.filtered.parquet"
    assert {r.pass_rate for r in load_index(filtered)} == {0.0}  # the tiny random policy solves nothing
    assert _train_files_finding(filtered).status is Status.OK

    code = rlkit_main(["eval", str(tiny_model_dir), str(index), *model, "-o", str(tmp_path / "eval")])
    assert code == 0
    results = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
    assert results["overall"] == {"pass@1": 0.0, "pass@2": 0.0}
    assert set(results["tasks"]) == set(TASKS[:2])
    assert all(t["n"] == 2 and t["c"] == 0 for t in results["tasks"].values())
