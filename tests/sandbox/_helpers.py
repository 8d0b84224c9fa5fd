"""Small task directories and environment factories for the sandbox tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from rlkit.tasks.images import task_image_ref

TEST_SH = """#!/bin/bash
cd /app
if python3 -c "import calc; assert calc.add(2, 3) == 5"; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_task(root: Path, name: str = "calc", *, task_toml: str = "", dockerfile: str | None = None) -> Path:
    """A minimal harbor task: /app/calc.py with a bug, a test.sh and an oracle solve.sh."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "environment" / "Dockerfile").write_text(dockerfile or (
        "FROM rlkit/base:bookworm\nWORKDIR /app\n"
        "RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py\n"))
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60\n[agent]\ntimeout_sec = 60\n'
                                    + task_toml)
    (task / "instruction.md").write_text("Fix add() in /app/calc.py.\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n")
    for script in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
        script.chmod(0o755)
    return task


def make_env(task: Path, tmp: Path, **options):
    """A DockerEnvironment for `task`, as harbor's Trial would construct it."""
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    from rlkit.sandbox.docker import DockerEnvironment

    harbor_task = Task(task)
    paths = TrialPaths(tmp / f"trial-{uuid.uuid4().hex[:6]}")
    paths.mkdir()
    if not harbor_task.config.environment.docker_image:  # the task names its image, as the trial runner does
        options.setdefault("image", task_image_ref(harbor_task.name))
    return DockerEnvironment(environment_dir=harbor_task.paths.environment_dir, environment_name=task.name,
                             session_id=f"{task.name}__{uuid.uuid4().hex[:7]}__env", trial_paths=paths,
                             task_env_config=harbor_task.config.environment, **options)
