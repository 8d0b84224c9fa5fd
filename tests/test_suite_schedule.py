"""The suite's xdist schedule: files stay whole, and the files that use the session's vLLM server
(`VLLM_SERVER_FILES`) go to one worker together, so the suite boots that server once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
import os, time
from pathlib import Path

def test_{name}_one():
    time.sleep(0.3)
    Path(os.environ["PROBE_OUT"], "{name}_one").write_text(os.environ["PYTEST_XDIST_WORKER"])

def test_{name}_two():
    time.sleep(0.3)
    Path(os.environ["PROBE_OUT"], "{name}_two").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''
FILES = {"a1": "tests/a/test_a1.py", "a2": "tests/a/test_a2.py", "a3": "tests/a/test_a3.py",
         "proxy": "tests/proxy/test_proxy_vllm.py", "steps": "tests/train/test_bench_engine_steps.py",
         "z": "tests/z/test_z.py"}


def test_the_vllm_server_files_run_on_one_worker_and_other_files_stay_whole(tmp_path: Path) -> None:
    from tests.conftest import VLLM_SERVER_FILES

    assert {FILES["proxy"], FILES["steps"]} <= VLLM_SERVER_FILES
    for name, path in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(PROBE.replace("{name}", name))
    # the hooks under test, as the suite's conftest registers them
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: F401\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROBE_OUT": str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-n", "3", "--dist", "loadfile", "--no-loadscope-reorder", *FILES.values()],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    worker = {p.name: p.read_text() for p in out.iterdir()}
    assert len(worker) == 2 * len(FILES)
    for name in FILES:  # a file stays on one worker
        assert worker[f"{name}_one"] == worker[f"{name}_two"], worker
    assert worker["proxy_one"] == worker["steps_one"], worker  # the two vLLM files share one
    assert len(set(worker.values())) == 3, worker  # and the work still spreads


def test_a_file_that_uses_the_vllm_server_outside_the_list_stops_the_collection(tmp_path: Path) -> None:
    (tmp_path / "tests" / "new").mkdir(parents=True)
    (tmp_path / "tests" / "new" / "test_new.py").write_text("def test_uses(vllm_server):\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "import pytest\nfrom tests.conftest import pytest_collection_modifyitems  # noqa: F401\n\n"
        "@pytest.fixture\ndef vllm_server():\n    return None\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "tests/new/test_new.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode != 0
    assert "tests/new/test_new.py use vllm_server: add them to VLLM_SERVER_FILES" in done.stdout + done.stderr
