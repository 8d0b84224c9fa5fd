"""The test suite's cleanups touch only what their tests made.

A crashed run of another project sits on the machine while they run: its orphaned sandbox and
proxy process (their owner was kill -9'd), a vLLM TMPDIR and scratch folder, a dead Ray session.
Every way the suite calls cleanup (its `rlkit cleanup` command lines, the Python calls, the trainer's
teardown) runs, and all of it must still be there: a user's orphans are theirs to clean, not the test
suite's. The cleanup test modules themselves run beside such a run of their own
(tests/ops/_bystander.py: `bystander_while_the_module_runs`).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ops._bystander import CrashedRun, crashed_run_outside

ROOT = Path(__file__).resolve().parents[2]


def _rlkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=300)


@pytest.fixture
def crashed_run(tmp_path: Path, base_image: str, docker_api) -> Iterator[CrashedRun]:
    with crashed_run_outside(tmp_path, base_image, docker_api) as run:
        yield run


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
