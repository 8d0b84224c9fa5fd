"""A stopped `rlkit tasks check` leaves no sandbox behind (issue 48): SIGTERM (a killed check, a closed
terminal's SIGHUP) stops it as Ctrl-C does, and the check removes its own sandboxes on the way out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rollout.conftest import EXAMPLES

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.docker


def _sandboxes(api, pid: int) -> list[dict]:
    return api.containers(all=True, filters={"label": ["rlkit.managed=1", f"rlkit.owner_pid={pid}"]})


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_a_stopped_tasks_check_removes_its_sandboxes(base_image: str, docker_api, tmp_path: Path, sig) -> None:
    task = tmp_path / "tasks" / "merge-intervals"
    shutil.copytree(EXAMPLES / "merge-intervals", task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 900\n")  # a solution that hangs
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLKIT_OWNER")}
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli.main", "tasks", "check", str(task), "--concurrency", "2"],
                            cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 400  # image build and sandbox start on a loaded machine: a hang guard
        while not _sandboxes(docker_api, proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert _sandboxes(docker_api, proc.pid), "the check never started a sandbox"
        time.sleep(2)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=180)
        assert "Traceback" not in out, out[-3000:]
        assert _sandboxes(docker_api, proc.pid) == [], out[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for container in _sandboxes(docker_api, proc.pid):
            docker_api.remove_container(container["Id"], force=True)
