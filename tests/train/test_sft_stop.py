"""`rlkit sft` stopped by SIGTERM while it records teacher trials (a scheduler's stop, `timeout`): its sandboxes
are removed. By default SIGTERM ends Python with no `finally` run and left every teacher container up."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "word-frequency"


def _owned(api, pid: int) -> list[dict]:
    return api.containers(all=True, filters={"label": f"rlkit.owner_pid={pid}"})


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_a_stopped_warm_start_leaves_no_sandbox(base_image: str, dockerd: str, tiny_model_dir: Path, tmp_path: Path,
                                                signum: int) -> None:
    from rlkit.sandbox.docker_api import api_client

    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / TASK.name)
    env = {**os.environ, "DOCKER_HOST": f"unix://{dockerd}", "PYTHONUNBUFFERED": "1",
           "RLKIT_CACHE_DIR": str(tmp_path / "cache")}  # no copy from an earlier build: it must record
    log = (tmp_path / "sft.out").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli.main", "sft", "--model", str(tiny_model_dir),
                             "--tasks", str(tasks), "--val-fraction", "0", "--epochs", "1",
                             "--out", str(tmp_path / "model")], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    api = api_client()
    try:
        deadline = time.monotonic() + 300
        while not _owned(api, proc.pid):
            assert proc.poll() is None, (tmp_path / "sft.out").read_text()[-3000:]
            assert time.monotonic() < deadline, "no teacher sandbox started in 300 s"
            time.sleep(0.5)
        proc.send_signal(signum)
        assert proc.wait(timeout=120) == 130, (tmp_path / "sft.out").read_text()[-3000:]
        assert _owned(api, proc.pid) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for container in _owned(api, proc.pid):
            api.remove_container(container["Id"], force=True)
