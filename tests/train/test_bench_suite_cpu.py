"""bench/suite_cpu.py: a pytest plugin charging each test the CPU of its process and its children."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SPIN = '''
import subprocess, sys

def test_spins_a_child():
    # then it lingers: a process that ends between two samples loses its last 0.5 s
    code = "import time\\nwhile time.process_time() < 1.5: pass\\ntime.sleep(1.5)"
    subprocess.run([sys.executable, "-c", code], check=True)

def test_does_nothing():
    pass
'''


def test_a_child_that_spins_is_charged_to_its_test(tmp_path: Path, capsys) -> None:
    (tmp_path / "test_spin.py").write_text(SPIN)
    out = tmp_path / "cpu.jsonl"
    env = dict(os.environ, RLKIT_SUITE_CPU=str(out), PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "bench.suite_cpu", "-p", "no:cacheprovider",
                    str(tmp_path / "test_spin.py")], cwd=tmp_path, env=env, check=True, capture_output=True)
    rows = {row["test"].split("::")[-1]: row["cpu_s"] for row in map(json.loads, out.read_text().splitlines())}
    spun = rows["test_spins_a_child"]
    assert sum(v for kind, v in spun.items() if kind.startswith("other:python")) >= 1.0, spun
    assert sum(rows.get("test_does_nothing", {}).values()) < 0.5
    load_script("bench/suite_cpu.py").report(out, top=5)
    assert "test_spins_a_child" in capsys.readouterr().out
