from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.sandbox._helpers import write_task


@pytest.fixture(scope="session")
def calc_task(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> Path:
    """A task whose image is built once per session (cached by docker afterwards)."""
    root = tmp_path_factory.mktemp("tasks")
    return write_task(root, "rlkit-test-calc", task_toml="[environment]\ncpus = 1\nmemory_mb = 256\n")


@pytest.fixture
def project() -> str:
    """A unique project label, so tests only ever see (and clean) their own sandboxes."""
    return f"test-{uuid.uuid4().hex[:8]}"
