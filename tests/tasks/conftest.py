"""Helpers for the task tests: small harbor task directories written on the fly."""

from __future__ import annotations

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
