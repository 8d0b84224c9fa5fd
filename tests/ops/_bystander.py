"""A crashed run of another project, for the cleanup tests to leave alone: its orphaned sandbox and
proxy process (their owner was kill -9'd), a vLLM TMPDIR and scratch folder, a dead Ray session.

`bystander_while_the_module_runs` keeps one on the machine while a whole cleanup test module runs, and
fails the module's teardown when any of it is gone: a user's orphans are theirs to clean, not the suite's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from rlkit.config import owner as O
from tests.sandbox._helpers import write_task

ROOT = Path(__file__).resolve().parents[2]
AN_HOUR_AGO = time.time() - 3600


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


@contextmanager
def crashed_run_outside(scope: Path, base_image: str, docker_api) -> Iterator[CrashedRun]:
    """A CrashedRun, checked to be a real orphan that an unscoped cleanup would take; removed afterwards."""
    from rlkit.ops.ownership import Verdict, verdict

    run = CrashedRun(scope / "bystander", base_image)
    try:
        labels = docker_api.inspect_container(run.containers[0])["Config"]["Labels"]
        assert verdict(labels, scope)[0] is Verdict.ORPHAN
        assert psutil.Process(run.proxy.pid).is_running()
        yield run
    finally:
        run.remove(docker_api)


@pytest.fixture(scope="module")
def bystander_while_the_module_runs(tmp_path_factory: pytest.TempPathFactory, base_image: str,
                                    dockerd: str) -> Iterator[CrashedRun]:
    """Autouse it in a cleanup test module: every test there runs beside another project's crashed run,
    and the module's teardown fails when a test took any of it."""
    from rlkit.sandbox.docker_api import api_client

    api = api_client()
    with crashed_run_outside(tmp_path_factory.mktemp("bystander"), base_image, api) as run:
        yield run
        assert run.left(api) == [], "a cleanup test took another project's leftovers"
