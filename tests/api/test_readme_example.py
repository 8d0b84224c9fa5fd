"""The README's "From Python" example, run as it is written: check, a 2-step run of the embedded default
(TRAIN_BSZ=2 x N_RESP=2 instead of 4 x 4, so minutes rather than tens of minutes), its status, and pass@k
of the merged checkpoint, on real docker, vLLM-CPU, Ray and the proxy.

What the example takes from `scripts/quickstart.sh` is stood in, by overrides added to its `run` keys:
the policy is the untrained tiny model (the warm start takes 5-20 minutes of its own) with MAX_RESP=256
(untrained, it writes to MAX_RESP in every trial), the task indexes are built here from bundled tasks,
and OUTPUT_DIR, the ports and the eval folder are in tmp_path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.api.conftest import EXAMPLES, REPO
from tests.validate.helpers import free_port

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=130)]

TRAIN_TASKS = ["calc-power-unary", "merge-intervals"]
VAL_TASKS = ["word-frequency"]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README.md has no python block under 'From Python'"
    return match.group(1)


@pytest.fixture
def indexes(base_image: str, tmp_path: Path) -> tuple[Path, Path]:
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks
    from rlkit.tasks.index import build_rows, write_index

    wanted = {*TRAIN_TASKS, *VAL_TASKS}
    outcomes = build_task_images([t for t in discover_tasks(EXAMPLES) if t.task_id in wanted])
    assert not [o for o in outcomes if o.status == "failed"], outcomes
    rows = build_rows(EXAMPLES, "train")
    train = write_index([r for r in rows if r.task_id in TRAIN_TASKS], tmp_path / "data" / "train.parquet")
    val = write_index([r.model_copy(update={"split": "val"}) for r in rows if r.task_id in VAL_TASKS],
                      tmp_path / "data" / "val.parquet")
    return train, val


def test_readme_example(tiny_model_dir: Path, indexes: tuple[Path, Path], tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    train, val = indexes
    code = readme_example()
    stand_ins = {"OUTPUT_DIR": str(tmp_path / "out"), "MODEL_PATH": str(tiny_model_dir),
                 "TRAIN_FILES": str(train), "VAL_FILES": str(val), "MAX_RESP": 256,
                 "PROXY_PORT": free_port(), "DASHBOARD_PORT": free_port(), "RAY_PORT": free_port()}
    embedded = str(REPO / "examples" / "configs" / "embedded.env")
    for line, replaced in (('cfg = "examples/configs/embedded.env"', f"cfg = {embedded!r}"),
                           ('val = ".rlkit/indexes/val.parquet"', f"val = {str(val)!r}")):
        assert line in code
        code = code.replace(line, replaced)
    head, run_line, tail = code.partition("\nrun = dict(")
    assert run_line
    first, rest = tail.split("\n", 1)
    code = f"{head}{run_line}{first}\nrun.update(STAND_INS)\n{rest}"
    monkeypatch.chdir(tmp_path)  # the example's eval folder (evals/api-example) lands here
    for key in ("PREFLIGHT_ONLY", "DRY_RUN", "RLKIT_SITE_ENV"):
        monkeypatch.delenv(key, raising=False)
    scope: dict = {"STAND_INS": stand_ins}
    exec(compile(code, str(REPO / "README.md"), "exec"), scope)  # noqa: S102 -- the README's own example

    report, result, status, scores = scope["report"], scope["result"], scope["status"], scope["scores"]
    assert report.ok and report.resolved.layer("TRAIN_BSZ").value == "override"
    out = tmp_path / "out"
    assert result.action == "train" and result.last_step == 2 and result.paths.exp == "api-example"
    assert result.checkpoint == out / "checkpoints" / "embedded" / "api-example" / "global_step_2"
    assert result.metrics["rollout/trials"] == 4.0  # TRAIN_BSZ x N_RESP trials a step
    assert result.metrics["response_length/max"] <= 256  # MAX_RESP, from the override layer
    assert status.live.state == "finished" and status.last_step == 2 and status.ref.total_steps == 2
    assert not (out / "logs" / "api-example.lock").exists()
    assert scope["model"] == result.checkpoint / "merged_hf" and (scope["model"] / "config.json").is_file()
    assert set(scores.overall) == {"pass@1", "pass@2"} and set(scores.tasks) == set(VAL_TASKS)
    assert scores.tasks["word-frequency"]["attempts"] == 2
    assert scores.path == tmp_path / "evals" / "api-example" / "eval_results.json" and scores.path.is_file()
