"""Recorded sample runs (tests/monitor/fixtures/<name>/: logs/ and harbor_trials/ of an embedded run, trimmed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = {"healthy": "fx-healthy", "parser": "fx-parser", "crashed": "fx-crash"}


@pytest.fixture
def run_copy(tmp_path: Path):
    """copy("healthy") → a writable copy of a recorded run's folder (OUTPUT_DIR)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(FIXTURES / name, dest)
        return dest

    return copy
