"""Which image each task runs in: the one naming rule, and the tasks an image build covers.

A task owns its image name. It is `[REGISTRY/]rlkit-task/<task name>:<variant>`, where the
task name is harbor's full `[task].name` (else the directory name) with anything an image
name cannot hold (a dataset's `/`, upper case, `#`, ...) turned into `-`:
`terminal-bench/regex-log` → `rlkit-task/terminal-bench-regex-log:latest`. Tasks that set
`[environment].docker_image` run that image as it is. The index, the trial runner and
`rlkit images build` all name images here; `rlkit.sandbox.images` builds what they name.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from rlkit.config.files import FileReadError, read_text
from rlkit.errors import UserError

TASK_IMAGE_REPO = "rlkit-task"
_BAD_NAME = re.compile(r"[^a-z0-9._-]+")


def _image_component(text: str) -> str:
    name = _BAD_NAME.sub("-", text.lower()).strip("-._")
    if not name:
        raise UserError(f"task id {text!r} gives an empty image name", fix="use letters/digits in task names")
    return name[:128]


def task_image_ref(task_id: str, registry: str | None = None, variant: str = "latest") -> str:
    """`[REGISTRY/]rlkit-task/<task_id>:<variant>`, the one place task images are named.

    `variant` is the tag: "latest" for the plain task image; scaffold layers baked on top use
    the scaffold name (e.g. "ohsdk")."""
    ref = f"{TASK_IMAGE_REPO}/{_image_component(task_id)}:{_image_component(variant)}"
    if registry:
        ref = f"{registry.rstrip('/')}/{ref}"
    return ref


@dataclass(frozen=True)
class TaskImageSpec:
    """One task's image: its name, and what to build it from (or that it is prebuilt)."""

    task_id: str
    task_dir: Path | None
    image: str  # the task's own docker_image, else its rlkit-task name
    prebuilt: bool  # [environment].docker_image: used as it is, never built

    @property
    def dockerfile(self) -> Path | None:
        if self.task_dir is None:
            return None
        path = self.task_dir / "environment" / "Dockerfile"
        return path if path.is_file() else None


def read_task_spec(task_dir: Path, task_id: str | None = None, registry: str | None = None) -> TaskImageSpec:
    """Image facts from a harbor task dir: its name ([task].name or the dir name) and image."""
    config_path = task_dir / "task.toml"
    data: dict = {}
    if config_path.is_file():
        try:
            data = tomllib.loads(read_text(config_path, max_bytes=2**20, root=task_dir))
        except FileReadError as exc:
            raise UserError(f"cannot read {exc.message}", file=exc.file, fix=exc.fix or "save it as UTF-8") from None
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"cannot parse {config_path}: {exc}", file=str(config_path),
                            fix="fix the TOML syntax") from exc
    task, environment = data.get("task"), data.get("environment")
    name = task_id or (task.get("name") if isinstance(task, dict) else None) or task_dir.name
    prebuilt = environment.get("docker_image") if isinstance(environment, dict) else None
    return TaskImageSpec(task_id=name, task_dir=task_dir, image=prebuilt or task_image_ref(name, registry),
                         prebuilt=bool(prebuilt))


def discover_tasks(source: Path, registry: str | None = None) -> list[TaskImageSpec]:
    """Tasks from a task dir, a dir of task dirs, or a parquet task index."""
    if not source.exists():
        raise UserError(f"{source} does not exist", fix="pass a tasks directory or a task index (.parquet)")
    if source.is_file() and source.suffix == ".parquet":
        return _tasks_from_index(source, registry)
    if (source / "task.toml").is_file():
        return [read_task_spec(source, registry=registry)]
    specs = [read_task_spec(d, registry=registry) for d in sorted(source.iterdir()) if (d / "task.toml").is_file()]
    if not specs:
        raise UserError(f"no task directories (with task.toml) under {source}",
                        fix="point at examples/tasks or a task index")
    return specs


def _tasks_from_index(path: Path, registry: str | None) -> list[TaskImageSpec]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["task_id", "task_source"]).to_pylist()
    specs: list[TaskImageSpec] = []
    for row in table:
        source = Path(str(row["task_source"]))
        if not source.is_absolute():
            source = (path.parent / source).resolve()
        if source.is_dir():
            specs.append(read_task_spec(source, task_id=row["task_id"], registry=registry))
        else:  # git url: nothing to build locally
            specs.append(TaskImageSpec(task_id=row["task_id"], task_dir=None,
                                       image=task_image_ref(row["task_id"], registry), prebuilt=False))
    return specs
