"""The suite's file order (tests/conftest.py): whole runs first, longest first; then the rest in file order; last
the files that need the agent images, which scripts/test.sh builds beside the first tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILES = {
    "test_a_images.py": "def test_bake(baked_images):\n    pass\n\ndef test_plain():\n    pass\n",
    "test_b_plain.py": "def test_one():\n    pass\n",
    "test_c_short_run.py": ("import pytest\n\n@pytest.mark.whole_run(seconds=30)\ndef test_run():\n    pass\n"),
    "test_d_long_run.py": ("import pytest\n\n@pytest.mark.whole_run(seconds=300)\ndef test_run():\n    pass\n"),
    "test_e_plain.py": "def test_two():\n    pass\n",
}
CONFTEST = '''import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401  the hook under test

def pytest_configure(config):
    config.addinivalue_line("markers", "whole_run(seconds): a whole run")

@pytest.fixture
def baked_images():
    return {}
'''


def test_whole_runs_first_then_file_order_then_the_files_that_need_the_agent_images(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    order = [line.split("::", 1)[0].rsplit("/", 1)[-1] + "::" + line.split("::", 1)[1]
             for line in proc.stdout.splitlines() if "::" in line]
    # test_a_images.py is first by name; its test_plain goes last with it, since xdist keeps a file whole
    assert order == ["test_d_long_run.py::test_run", "test_c_short_run.py::test_run", "test_b_plain.py::test_one",
                     "test_e_plain.py::test_two", "test_a_images.py::test_bake", "test_a_images.py::test_plain"]
