"""The test suite's cleanups touch only what their tests made.

A crashed run of another project sits on the machine while they run: its orphaned sandbox and
proxy process (their owner was kill -9'd), a vLLM TMPDIR and scratch folder, a dead Ray session.
Every way the suite calls cleanup (its `rlkit cleanup` command lines, the Python calls, the trainer's
teardown) and then the cleanup test modules themselves run, and all of it must still be there:
a user's orphans are theirs to clean, not the test suite's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from rlkit.config import owner as O
from tests.sandbox._helpers import write_task

ROOT = Path(__file__).resolve().parents[2]
AN_HOUR_AGO = time.time() - 3600


def _rlkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=300)


def _aged(path: Path) -> Path:
    for p in (*path.rglob("*"), path):
        os.utime(p, (AN_HOUR_AGO, AN_HOUR_AGO), follow_symlinks=False)
    return path


def _scratch_like(path: Path) -> Path:
    for sub in ("cache", "inductor", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return _aged(path)


class CrashedRun:
    """Another project's run, kill -9'd: what it left, and whether all of it is still there."""

    def __init__(self, tmp_path: Path, base_image: str) -> None:
        from rlkit.ops.tmpfiles import REPO_SCRATCH

        tag = uuid.uuid4().hex[:8]
        self.project = f"bystander-{tag}"
        task = write_task(tmp_path, "rlkit-test-calc")
        runner = subprocess.Popen([sys.executable, "-m", "tests.ops._start_run_leftovers", str(task), str(tmp_path),
                                   self.project, "crashed", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = runner.stdout.readline()
        assert line.startswith("{"), line + runner.stderr.read()[-2000:]
        owner = json.loads(line)["pid"]
        code = "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\ntime.sleep(3600)\n"
        self.proxy = subprocess.Popen([sys.executable, "-c", code, "rlkit", "proxy", "serve"], env={
            **os.environ, O.OWNER_PID_ENV: str(owner), O.OWNER_START_ENV: f"{O.process_start(owner):.2f}",
            O.OWNER_PROJECT_ENV: self.project, O.OWNER_EXPERIMENT_ENV: "crashed"})
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        vllm_tmp, session = Path(f"/tmp/rlkit-vllm-{tag}"), Path("/tmp/ray") / f"session_2000-01-01_00-00-00_{tag}"
        for folder in (vllm_tmp, session):
            folder.mkdir(parents=True)
        self.files = [_aged(vllm_tmp), _aged(session), _scratch_like(REPO_SCRATCH / f"crashed_{tag}")]
        from rlkit.ops.cleanup import docker_sandboxes

        self.containers = [c["Id"] for c in docker_sandboxes(self.project)]
        assert len(self.containers) == 1

    def left(self, docker_api) -> list[str]:
        """What of the crashed run is gone (empty when all of it is still there)."""
        gone = [str(p) for p in self.files if not p.exists()]
        gone += [c[:12] for c in self.containers if not docker_api.containers(all=True, filters={"id": c})]
        if self.proxy.poll() is not None:
            gone.append(f"proxy pid {self.proxy.pid}")
        return gone

    def remove(self, docker_api) -> None:
        import shutil

        if self.proxy.poll() is None:
            self.proxy.kill()
            self.proxy.wait()
        for cid in self.containers:
            if docker_api.containers(all=True, filters={"id": cid}):
                docker_api.remove_container(cid, force=True)
        for path in self.files:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def crashed_run(tmp_path: Path, base_image: str, docker_api):
    run = CrashedRun(tmp_path / "bystander", base_image)
    from rlkit.ops.ownership import Verdict, verdict

    labels = docker_api.inspect_container(run.containers[0])["Config"]["Labels"]
    assert verdict(labels, tmp_path)[0] is Verdict.ORPHAN  # a real orphan: an unscoped cleanup would take it
    assert psutil.Process(run.proxy.pid).is_running()
    try:
        yield run
    finally:
        run.remove(docker_api)


@pytest.mark.docker
def test_every_cleanup_the_suite_runs_spares_a_crashed_run_outside_its_scope(crashed_run: CrashedRun,
                                                                             tmp_path: Path, docker_api) -> None:
    from rlkit.ops.cleanup import Policy, cleanup

    mine = f"scope-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    calls = [
        _rlkit("cleanup", "--project", mine, "--output-dir", str(out)),
        _rlkit("cleanup", "--project", mine, "--dry-run", "--output-dir", str(out)),
        _rlkit("cleanup", "--project", mine, "--sandboxes-only"),
        _rlkit("cleanup", "--project", mine, "--experiment", "e", "--force", "--sandboxes-only"),
    ]
    assert all(c.returncode == 0 for c in calls), [c.stdout + c.stderr for c in calls]
    cleanup(mine, k8s=False, processes=True, tmp=True, policy=Policy(out, other_users=True))
    cleanup(mine, "e", k8s=False)  # the local trainer's teardown
    for call in calls:
        assert crashed_run.project not in call.stdout, call.stdout
    assert crashed_run.left(docker_api) == []


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.vllm
def test_the_cleanup_tests_spare_a_crashed_run_outside_their_scope(crashed_run: CrashedRun, docker_api) -> None:
    """tests/ops/test_cleanup.py and test_cleanup_run.py, run whole while the crashed run sits there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ops/test_cleanup.py",
                           "tests/ops/test_cleanup_run.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert crashed_run.left(docker_api) == []
