"""Fixtures for trial tests against a real dockerd."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"
DATA = Path(__file__).resolve().parent / "data"


def in_place_copy(task_dir: Path, root: Path) -> Path:
    """A copy of the task under `root` that declares `grading = "in-place"` (image and sources unchanged)."""
    import shutil

    target = root / "in-place" / task_dir.name
    if not target.exists():
        shutil.copytree(task_dir, target)
        with (target / "task.toml").open("a") as toml:
            toml.write('\n[verifier.rlkit]\ngrading = "in-place"\n')
    return target


@pytest.fixture(scope="session")
def task_images(base_image: str) -> list[str]:
    """Every bundled task's image, built once (cached by docker across runs)."""
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    outcomes = build_task_images(discover_tasks(EXAMPLES))
    failed = [o for o in outcomes if o.status == "failed"]
    assert not failed, failed
    return [o.image for o in outcomes]


def containers_of(session: str, project: str | None = None) -> list[dict]:
    """Containers (running or not) labelled with this trial session (and project: another test's
    trial, `rlkit tasks check` for one, may run a session of the same name at the same time)."""
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.labels import PROJECT, SESSION, label_value

    labels = [f"{SESSION}={label_value(session)}"] + ([f"{PROJECT}={label_value(project)}"] if project else [])
    return api_client().containers(all=True, filters={"label": labels})
