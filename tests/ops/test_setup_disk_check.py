"""scripts/setup.sh stops with a FATAL naming the free space before pip can fill the disk."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_setup_refuses_to_build_a_venv_on_a_nearly_full_disk(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    shutil.copytree(REPO / "scripts" / "locks", checkout / "scripts" / "locks")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    df = fake_bin / "df"  # 1 GiB free
    df.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                  "echo '/dev/vda 263174212 262125636 1048576 100% /'\n")
    df.chmod(0o755)
    result = subprocess.run(["bash", "scripts/setup.sh", "--no-apt", "--no-vllm"], check=False, cwd=checkout,
                            env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "✗ FATAL setup: .venv" in result.stderr and "1 GiB are free" in result.stderr
    assert "fix: free disk space" in result.stderr
    assert not (checkout / ".venv").exists()  # stopped before creating anything
