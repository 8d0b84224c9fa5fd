"""Both venvs write a module's bytecode the first time a process imports it, also where the environment
says PYTHONDONTWRITEBYTECODE=1 (as on these machines): setup compiles nothing up front (scripts/setup.sh,
bytecode_on), so without it every vLLM, Ray or trainer process would compile its imports again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("venv", [".venv", ".venv-vllm"])
def test_a_first_import_writes_its_bytecode_under_pythondontwritebytecode(venv: str, tmp_path: Path) -> None:
    python = REPO / venv / "bin" / "python"
    assert python.is_file(), f"{python} is missing: run bash scripts/setup.sh"
    (tmp_path / "first_import_probe.py").write_text("VALUE = 41 + 1\n")
    code = "import sys; sys.path.insert(0, sys.argv[1]); import first_import_probe; print(sys.dont_write_bytecode)"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([str(python), "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    written = list((tmp_path / "__pycache__").glob("first_import_probe.cpython-3*.pyc"))
    assert len(written) == 1, sorted(p.name for p in tmp_path.rglob("*"))
