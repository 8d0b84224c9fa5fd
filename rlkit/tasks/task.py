"""Reading harbor task directories.

A task directory is harbor's format (task.toml, instruction.md, environment/Dockerfile
or [environment].docker_image, tests/test.sh, solution/solve.sh). harbor's own `Task`
class parses and validates it; `TaskInfo` keeps the few fields rlkit needs to index,
sample and schedule a task, so callers never hold harbor objects.

A task folder is third-party input: before harbor reads it, `folder_problem` checks it through
rlkit.config.files (its files regular, no link out of the folder, bounded sizes; environment/,
tests/ and solution/, which go to the daemon or into the sandbox, hold no FIFO, device or huge
file), and every number harbor reads is checked here (timeouts finite and in range).
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlkit.config import files
from rlkit.errors import UserError

TASK_CONFIG = "task.toml"
DIFFICULTY_LABELS = ("easy", "medium", "hard")
TIMEOUT_MAX_S = 7 * 24 * 3600.0  # an agent or a verifier that runs longer than a week is a typo
TEXT_FILES = {"task.toml": 2**20, "instruction.md": 4 * 2**20, "solution/solve.sh": 16 * 2**20,
              "tests/test.sh": 16 * 2**20, "environment/Dockerfile": 2**20}
TREES = {"environment": 2 * 2**30, "tests": 2**30, "solution": 2**30}  # bytes in all: what is sent or copied


def folder_problem(path: Path) -> str | None:
    """What makes task folder `path` unsafe to read or send to docker (None: nothing): a file that is a FIFO, a
    device, a link out of the folder, or too big; a build context with such an entry or too many bytes."""
    for rel, limit in TEXT_FILES.items():
        file = path / rel
        if files.present(file):
            try:
                files.read_bytes(file, max_bytes=limit, root=path)
            except files.FileReadError as exc:
                return f"{rel} {exc.reason}"
    for rel, limit in TREES.items():
        folder = path / rel
        if files.present(folder):
            try:
                files.confine(folder, path)
                if files.is_dir(folder):
                    files.check_tree(folder, max_bytes=limit, max_file_bytes=limit)
            except files.FileReadError as exc:
                shown = exc.path[len(str(path)) + 1:] if exc.path.startswith(f"{path}/") else rel
                return f"{shown} {exc.reason}"
    return None


def _in_range(value: object, hi: float) -> bool:
    """A number (not a bool) in (0, hi]; an int of 400 digits is out of range, never an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return 0 < value <= hi
    return math.isfinite(value) and 0 < value <= hi


def _timeout(value: object, key: str, config_path: Path) -> float | None:
    """A timeout from task.toml: None, or seconds, finite, in (0, TIMEOUT_MAX_S]."""
    if value is None:
        return None
    if not _in_range(value, TIMEOUT_MAX_S):
        raise UserError(f"{key} must be a number of seconds in (0, {TIMEOUT_MAX_S:.0f}], got {value!r}", key=key,
                        file=str(config_path), fix=f"e.g. {key.split('.')[-1]} = 600.0")
    return float(value)


class TaskInfo(BaseModel):
    """What rlkit reads from one harbor task directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(description="harbor task name ([task].name, else the directory name)")
    path: Path = Field(description="absolute path of the task directory")
    instruction: str = Field(description="instruction.md, canary lines stripped")
    docker_image: str | None = Field(default=None, description="[environment].docker_image if set")
    has_dockerfile: bool = Field(description="environment/Dockerfile exists")
    has_solution: bool = Field(description="solution/solve.sh exists (the oracle can run)")
    agent_timeout_sec: float | None = Field(default=None, description="[agent].timeout_sec")
    verifier_timeout_sec: float = Field(description="[verifier].timeout_sec")
    difficulty: str | None = Field(default=None, description="[metadata].difficulty label")
    pass_rate: float | None = Field(default=None, description="[metadata].pass_rate in [0, 1]")
    cpus: float | None = Field(default=None, description="[environment].cpus")
    memory_mb: int | None = Field(default=None, description="[environment].memory_mb")


def load_task(task_dir: str | Path) -> TaskInfo:
    """Parse one task directory with harbor; raise UserError naming the file on any problem."""
    from harbor.models.task.task import Task  # harbor is an optional extra

    path = Path(task_dir).expanduser().resolve()
    config_path = path / TASK_CONFIG
    if not files.present(config_path):
        raise UserError(f"{path} is not a harbor task directory (no {TASK_CONFIG})",
                        file=str(config_path), fix="point at a directory that holds task.toml")
    problem = folder_problem(path)
    if problem is not None:
        raise UserError(f"task {path.name}: {problem}", file=str(path),
                        fix="make it a regular file inside the task folder (or remove it)")
    try:
        task = Task(path)
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(f"invalid task {path.name}: {files.clip(str(exc), 600)}", file=str(config_path),
                        fix="compare with a task in examples/tasks/") from exc
    config = task.config
    has_dockerfile = (task.paths.environment_dir / "Dockerfile").is_file()
    if not config.environment.docker_image and not has_dockerfile:
        raise UserError(f"task {task.name} has neither environment/Dockerfile nor [environment].docker_image",
                        file=str(config_path), key="environment.docker_image",
                        fix="add environment/Dockerfile or set docker_image in task.toml")
    metadata = config.metadata or {}
    return TaskInfo(
        task_id=task.name,
        path=path,
        instruction=task.instruction,
        docker_image=config.environment.docker_image,
        has_dockerfile=has_dockerfile,
        has_solution=task.paths.discovered_solve_path is not None,
        agent_timeout_sec=_timeout(config.agent.timeout_sec, "agent.timeout_sec", config_path),
        verifier_timeout_sec=_timeout(config.verifier.timeout_sec, "verifier.timeout_sec", config_path),
        difficulty=_difficulty(metadata.get("difficulty"), config_path),
        pass_rate=_pass_rate(metadata.get("pass_rate"), config_path),
        cpus=_bounded(config.environment.cpus, "environment.cpus", 4096, config_path),
        memory_mb=_bounded(config.environment.memory_mb, "environment.memory_mb", 2**24, config_path),
    )


def discover_tasks(root: str | Path) -> list[TaskInfo]:
    """Every task under `root` (itself a task, or a tree of task directories), sorted by id."""
    root_path = Path(root).expanduser().resolve()
    if not root_path.is_dir():
        raise UserError(f"tasks directory {root_path} does not exist", fix="check the path")
    if (root_path / TASK_CONFIG).is_file():
        return [load_task(root_path)]
    tasks = [load_task(cfg.parent) for cfg in sorted(root_path.rglob(TASK_CONFIG))
             if not _is_nested_in_task(cfg.parent, root_path)]
    if not tasks:
        raise UserError(f"no task directories (with {TASK_CONFIG}) under {root_path}",
                        fix="point at a directory of harbor tasks, e.g. examples/tasks")
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.task_id in seen:
            raise UserError(f"task id {task.task_id!r} is used twice: {seen[task.task_id]} and {task.path}",
                            key="task.name", fix="give each task a unique [task].name")
        seen[task.task_id] = task.path
    return sorted(tasks, key=lambda t: t.task_id)


def _is_nested_in_task(task_dir: Path, root: Path) -> bool:
    """A task.toml inside another task (e.g. a fixture under tests/) is not a task of its own."""
    return any((parent / TASK_CONFIG).is_file() for parent in task_dir.parents if parent.is_relative_to(root)
               and parent != task_dir)


def _bounded[N: (int, float)](value: N | None, key: str, hi: int, config_path: Path) -> N | None:
    if value is None:
        return None
    if not _in_range(value, hi):
        raise UserError(f"{key} must be a number in (0, {hi}], got {value!r}", key=key, file=str(config_path),
                        fix=f"e.g. {key.split('.')[-1]} = 1")
    return value


def _difficulty(value: object, config_path: Path) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"metadata.difficulty must be a label, got {value!r}", key="metadata.difficulty",
                        file=str(config_path), fix=f"use one of {', '.join(DIFFICULTY_LABELS)}")
    return value.strip().lower()


def _pass_rate(value: object, config_path: Path) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:  # no float(): 400 digits
        raise UserError(f"metadata.pass_rate must be a number in [0, 1], got {value!r}",
                        key="metadata.pass_rate", file=str(config_path), fix="e.g. pass_rate = 0.25")
    return float(value)
