"""Helpers for the task tests: small harbor task directories written on the fly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def write_task(root: Path, name: str, *, toml: str = "", docker_image: str | None = "rlkit/base:bookworm",
               instruction: str = "Fix it.\n") -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "instruction.md").write_text(instruction)
    env = f'[environment]\ndocker_image = "{docker_image}"\n' if docker_image else ""
    (task / "task.toml").write_text(f'version = "1.0"\n{toml}\n{env}')
    return task


@pytest.fixture
def make_task(tmp_path: Path):
    def make(name: str, **kwargs) -> Path:
        return write_task(tmp_path / "tasks", name, **kwargs)

    return make


def graded_on_host(task: Path, solve: Path | None, tmp: Path) -> int:
    """pytest's exit status for the task's graded suite on its project as `solve` leaves it (None: unchanged).
    The patch is applied on the host, no sandbox: this checks a task's data, not how a trial is graded."""
    app = tmp / (solve.stem if solve else "unchanged")
    subprocess.run(["cp", "-r", str(task / "environment" / "app"), str(app)], check=True)
    if solve is not None:
        script = solve.read_text().replace("cd /app", f"cd {app}")
        subprocess.run(["bash", "-c", script], check=True, capture_output=True)
    return subprocess.run([sys.executable, "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--noconftest", "-c", "/dev/null", f"--rootdir={tmp}", "-o", f"pythonpath={app}",
                           str(task / "tests" / "test_graded.py")], check=False, capture_output=True).returncode
