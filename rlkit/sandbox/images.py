"""Task images: naming (`task_image_ref`) and building them from task directories.

A task's image is built from its `environment/Dockerfile` (which starts
`FROM rlkit/base:bookworm`) and named `rlkit-task/<task_id>:latest`, or
`<REGISTRY>/rlkit-task/<task_id>:latest` when a registry is configured. Tasks that
set `[environment].docker_image` use that image as-is. The naming lives in this one
function so the task index, trial runner and scaffold layers all agree.
"""

from __future__ import annotations

import re
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rlkit.errors import ImageError, UserError

TASK_IMAGE_REPO = "rlkit-task"
_BAD_NAME = re.compile(r"[^a-z0-9._-]+")


def _image_component(text: str) -> str:
    name = _BAD_NAME.sub("-", text.lower()).strip("-._")
    if not name:
        raise UserError(f"task id {text!r} gives an empty image name", fix="use letters/digits in task names")
    return name[:128]


def task_image_ref(task_id: str, registry: str | None = None, variant: str = "latest") -> str:
    """`[REGISTRY/]rlkit-task/<task_id>:<variant>` — the one place task images are named.

    `variant` is the tag: "latest" for the plain task image; scaffold layers baked on
    top use the scaffold name (e.g. "ohsdk")."""
    ref = f"{TASK_IMAGE_REPO}/{_image_component(task_id)}:{_image_component(variant)}"
    if registry:
        ref = f"{registry.rstrip('/')}/{ref}"
    return ref


@dataclass(frozen=True)
class TaskImageSpec:
    """What to build (or reuse) for one task."""

    task_id: str
    task_dir: Path | None
    prebuilt: str | None  # [environment].docker_image: used as-is

    @property
    def dockerfile(self) -> Path | None:
        if self.task_dir is None:
            return None
        path = self.task_dir / "environment" / "Dockerfile"
        return path if path.is_file() else None


def read_task_spec(task_dir: Path, task_id: str | None = None) -> TaskImageSpec:
    """Image facts from a harbor task dir: task id ([task].name or the dir name), docker_image."""
    config_path = task_dir / "task.toml"
    data: dict = {}
    if config_path.is_file():
        try:
            data = tomllib.loads(config_path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"cannot parse {config_path}: {exc}", file=str(config_path),
                            fix="fix the TOML syntax") from exc
    name = (data.get("task") or {}).get("name") or task_dir.name
    prebuilt = (data.get("environment") or {}).get("docker_image")
    return TaskImageSpec(task_id=task_id or name.split("/")[-1], task_dir=task_dir, prebuilt=prebuilt)


def discover_tasks(source: Path) -> list[TaskImageSpec]:
    """Tasks from a task dir, a dir of task dirs, or a parquet task index."""
    if not source.exists():
        raise UserError(f"{source} does not exist", fix="pass a tasks directory or a task index (.parquet)")
    if source.is_file() and source.suffix == ".parquet":
        return _tasks_from_index(source)
    if (source / "task.toml").is_file():
        return [read_task_spec(source)]
    specs = [read_task_spec(d) for d in sorted(source.iterdir()) if (d / "task.toml").is_file()]
    if not specs:
        raise UserError(f"no task directories (with task.toml) under {source}",
                        fix="point at examples/tasks or a task index")
    return specs


def _tasks_from_index(path: Path) -> list[TaskImageSpec]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["task_id", "task_source"]).to_pylist()
    specs: list[TaskImageSpec] = []
    for row in table:
        source = Path(str(row["task_source"]))
        if not source.is_absolute():
            source = (path.parent / source).resolve()
        if source.is_dir():
            specs.append(read_task_spec(source, task_id=row["task_id"]))
        else:  # git url: nothing to build locally
            specs.append(TaskImageSpec(task_id=row["task_id"], task_dir=None, prebuilt=None))
    return specs


@dataclass
class BuildOutcome:
    task_id: str
    image: str
    status: str  # built | cached | prebuilt | pushed | skipped | failed
    detail: str = ""


ProgressFn = Callable[[int, int, str], None]


def text_progress(stream=None) -> ProgressFn:
    """A one-line text progress bar on stderr (looked up per call, so a redirected stderr is honoured)."""
    def show(done: int, total: int, label: str) -> None:
        out = stream or sys.stderr
        width = 30
        filled = int(width * done / max(total, 1))
        end = "\n" if done == total else ""
        out.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:50]:<50}{end}")
        out.flush()
    return show


def build_task_images(specs: Iterable[TaskImageSpec], *, registry: str | None = None, push: bool = False,
                      force: bool = False, progress: ProgressFn | None = None,
                      layer: Callable[[str, TaskImageSpec], BuildOutcome] | None = None) -> list[BuildOutcome]:
    """Build each task image (skip when present unless `force`), optionally push.

    `layer(base_ref, spec)` is the hook for a scaffold layer baked on top of the task
    image (`rlkit images build --scaffold NAME`); it returns that layer's outcome."""
    from rlkit.sandbox.docker_api import api_client

    api = api_client()
    specs = list(specs)
    outcomes: list[BuildOutcome] = []
    for i, spec in enumerate(specs):
        if progress:
            progress(i, len(specs), spec.task_id)
        outcome = _build_one(api, spec, registry, force)
        if outcome.status != "failed" and push and registry and not spec.prebuilt:
            outcome = _push(api, outcome)
        if layer is not None and outcome.status != "failed":
            outcome = layer(outcome.image, spec)
        outcomes.append(outcome)
    if progress:
        progress(len(specs), len(specs), "done")
    return outcomes


def image_exists(api, ref: str) -> bool:
    import docker.errors

    try:
        api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _build_one(api, spec: TaskImageSpec, registry: str | None, force: bool) -> BuildOutcome:
    if spec.prebuilt:
        return BuildOutcome(spec.task_id, spec.prebuilt, "prebuilt")
    ref = task_image_ref(spec.task_id, registry)
    if spec.dockerfile is None:
        return BuildOutcome(spec.task_id, ref, "skipped", "no environment/Dockerfile")
    if not force and image_exists(api, ref):
        return BuildOutcome(spec.task_id, ref, "cached")
    try:
        build_image(api, spec.dockerfile.parent, ref, labels={"rlkit.task": spec.task_id})
    except ImageError as exc:
        return BuildOutcome(spec.task_id, ref, "failed", exc.message)
    return BuildOutcome(spec.task_id, ref, "built")


def build_image(api, context_dir: Path, ref: str, labels: dict[str, str] | None = None,
                dockerfile: str = "Dockerfile") -> None:
    """`docker build` through the Engine API (classic builder, works offline)."""
    started = time.monotonic()
    log: list[str] = []
    error = ""
    for chunk in api.build(path=str(context_dir), tag=ref, dockerfile=dockerfile, rm=True, forcerm=True,
                           labels=labels or {}, decode=True, pull=False):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            error = chunk["error"]
    if error:
        tail = "".join(log)[-1500:]
        raise ImageError(f"building {ref} failed: {error.strip()}\n{tail}", image=ref,
                         seconds=time.monotonic() - started)


def _push(api, outcome: BuildOutcome) -> BuildOutcome:
    error = ""
    for chunk in api.push(outcome.image, stream=True, decode=True):
        if "error" in chunk:
            error = chunk["error"]
    if error:
        return BuildOutcome(outcome.task_id, outcome.image, "failed", f"push: {error}")
    return BuildOutcome(outcome.task_id, outcome.image, "pushed")
