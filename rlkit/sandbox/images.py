"""Task images: building what the tasks name (`rlkit.tasks.images` names them).

A task's image is built from its `environment/Dockerfile` (which starts
`FROM rlkit/base:bookworm`, built offline). A task's prebuilt `[environment].docker_image`
is only checked for: nothing is pulled. Failures say what to do about them: no registry
can be reached here, so a base image must be built or loaded locally.

Like the base image, a task image is tagged by a hash of what builds it (every file under
its environment/, Dockerfile included): `rlkit-task/<task>:src-<hash>` beside the name the
task gives it, with the hash in the `rlkit.source` label. A build is reused only while the
hash matches; after an edit, `rlkit images build` and the next trial rebuild it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlkit.errors import ImageError
from rlkit.sandbox.labels import TASK as TASK_LABEL


class TaskImage(Protocol):
    """What a build needs to know of a task (`rlkit.tasks.images.TaskImageSpec`)."""

    task_id: str
    image: str
    prebuilt: bool

    @property
    def dockerfile(self) -> Path | None: ...


@dataclass
class BuildOutcome:
    task_id: str
    image: str
    status: str  # built | cached | prebuilt | pushed | skipped | missing | failed
    detail: str = ""


ProgressFn = Callable[[int, int, str], None]
FAILED = frozenset({"failed", "missing"})
SOURCE_LABEL = "rlkit.source"
_digests: dict[str, tuple[tuple, str]] = {}  # context dir -> (stat signature, digest)
_digests_lock = threading.Lock()


def source_digest(context_dir: Path) -> str:
    """Short hash of a build context: every file's path, exec bit and bytes (links: their target).

    Kept per process while no file's size, mtime or mode changed, so a trial pays a stat walk."""
    root = Path(context_dir)
    files: list[tuple[str, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            try:
                files.append((os.path.relpath(full, root), os.lstat(full)))
            except OSError:
                continue
    signature = tuple((rel, st.st_size, st.st_mtime_ns, st.st_mode) for rel, st in files)
    key = str(root.resolve())
    with _digests_lock:
        known = _digests.get(key)
    if known is not None and known[0] == signature:
        return known[1]
    digest = hashlib.sha256()
    for rel, st in files:
        full = root / rel
        digest.update(f"{rel}\0{st.st_mode & 0o111 != 0}\0".encode())
        if full.is_symlink():
            digest.update(os.readlink(full).encode())
        else:  # streamed: a sparse 4 GB file costs no 4 GB of memory; a FIFO is refused, never waited on
            from rlkit.config.files import open_regular

            with open_regular(full) as f:
                while block := f.read(1 << 20):
                    digest.update(block)
        digest.update(b"\0")
    value = digest.hexdigest()[:12]
    with _digests_lock:
        _digests[key] = (signature, value)
    return value


def source_tag(ref: str, digest: str) -> str:
    """`repo:src-<digest>` for a task image reference `repo[:tag]`."""
    repo = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    return f"{repo}:src-{digest}"


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


def build_task_images(specs: Iterable[TaskImage], *, push: bool = False,
                      force: bool = False, progress: ProgressFn | None = None,
                      layer: Callable[[str, TaskImage], BuildOutcome] | None = None) -> list[BuildOutcome]:
    """Build each task image under the name the task gives it (reused while its source hash
    matches, unless `force`), optionally push (the names carry the registry).

    `layer(base_ref, spec)` is the hook for a scaffold layer baked on top of the task
    image (`rlkit images build --scaffold NAME`); it returns that layer's outcome."""
    from rlkit.sandbox.docker_api import api_client

    api = api_client()
    specs = list(specs)
    outcomes: list[BuildOutcome] = []
    for i, spec in enumerate(specs):
        if progress:
            progress(i, len(specs), spec.task_id)
        outcome = _build_one(api, spec, force)
        if push and not spec.prebuilt and outcome.status not in FAILED:
            outcome = _push(api, outcome)
        if layer is not None and outcome.status not in FAILED:
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


def inspect_labels(api, ref: str) -> dict[str, str] | None:
    """The labels of a local image (None when there is no such image)."""
    info = _inspect(api, ref)
    return None if info is None else (info.get("Config") or {}).get("Labels") or {}


def image_id(api, ref: str) -> str | None:
    """The id of a local image (None when there is no such image)."""
    info = _inspect(api, ref)
    return None if info is None else info["Id"]


def image_size(api, ref: str) -> int | None:
    """The bytes a local image's layers hold, all of them (None when there is no such image)."""
    info = _inspect(api, ref)
    return None if info is None else int(info["Size"])


# One build per image at a time in this process; concurrent trials of a task wait for it.
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def ensure_task_image(api, image: str, context_dir: Path | None, task: str, *, force: bool = False,
                      build_missing: bool = True, baked: bool = False,
                      log: Callable[[str], None] = lambda _msg: None) -> dict:
    """The inspect answer of the image a trial runs, built first when it is missing or was
    built from other sources than `context_dir` holds now (`context_dir` None: prebuilt, as is).

    `baked`: a scaffold layer on the task image, which only `rlkit images build --scaffold`
    makes; a stale one is an error, not a build."""
    from rlkit.errors import SandboxError

    info = None if force and context_dir is not None else _inspect(api, image)
    if info is None:
        if context_dir is None or not build_missing:
            raise SandboxError(f"image {image} is not present locally", image=image,
                               fix="build it with `rlkit images build` (no registry can be pulled from here)")
        _build_once(api, image, context_dir, task, force=force, log=log)
    elif context_dir is not None and _stale(info, context_dir):
        if baked:
            raise SandboxError(f"image {image} was built from an older environment/ of task {task}", image=image,
                               fix="rebuild it: rlkit images build TASKS --scaffold <scaffold>")
        _build_once(api, image, context_dir, task, force=False, log=log)
    else:
        return info
    return _inspect(api, image) or {}


def _inspect(api, ref: str) -> dict | None:
    import docker.errors

    try:
        return api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None


def _stale(info: dict, context_dir: Path) -> bool:
    """rlkit built the image from a task's environment/, and not from what it holds now."""
    labels = (info.get("Config") or {}).get("Labels") or {}
    return TASK_LABEL in labels and labels.get(SOURCE_LABEL) != source_digest(context_dir)


def _build_once(api, image: str, context_dir: Path, task: str, *, force: bool, log: Callable[[str], None]) -> None:
    # A thread lock, not an asyncio one: trials of one task may run on different event loops.
    with _build_locks_guard:
        lock = _build_locks.setdefault(image, threading.Lock())
    with lock:
        info = _inspect(api, image)
        if info is not None and not force and not _stale(info, context_dir):
            return  # built by another trial meanwhile
        log(f"building {image} from {context_dir}")
        build_task_image(api, context_dir, image, labels={TASK_LABEL: task})


def build_task_image(api, context_dir: Path, ref: str, labels: dict[str, str] | None = None) -> str:
    """Build a task image as `ref` and as its source-hash tag; returns the hash."""
    digest = source_digest(context_dir)
    build_image(api, context_dir, ref, labels={**(labels or {}), SOURCE_LABEL: digest})
    repo, _, tag = source_tag(ref, digest).rpartition(":")
    api.tag(ref, repo, tag)
    return digest


def _build_one(api, spec: TaskImage, force: bool) -> BuildOutcome:
    ref = spec.image
    if spec.prebuilt:
        if image_exists(api, ref):
            return BuildOutcome(spec.task_id, ref, "prebuilt")
        return BuildOutcome(spec.task_id, ref, "missing",
                            f"[environment].docker_image {ref} is not on this docker host and nothing is pulled "
                            "here: `docker load` it, or drop docker_image and give the task an "
                            "environment/Dockerfile FROM an image that is here (rlkit/base:bookworm)")
    if spec.dockerfile is None:
        return BuildOutcome(spec.task_id, ref, "skipped", "no environment/Dockerfile")
    context = spec.dockerfile.parent
    digest = source_digest(context)
    if not force:
        labels = inspect_labels(api, ref)
        if labels is not None and labels.get(SOURCE_LABEL) == digest:
            return BuildOutcome(spec.task_id, ref, "cached")
        hashed = source_tag(ref, digest)
        if inspect_labels(api, hashed) is not None:  # built from these sources before: name it again
            repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
            api.tag(hashed, repo, tag)
            return BuildOutcome(spec.task_id, ref, "cached")
    try:
        build_task_image(api, context, ref, labels={TASK_LABEL: spec.task_id})
    except ImageError as exc:
        return BuildOutcome(spec.task_id, ref, "failed", exc.message)
    return BuildOutcome(spec.task_id, ref, "built")


def build_image(api, context_dir: Path, ref: str, labels: dict[str, str] | None = None,
                dockerfile: str = "Dockerfile") -> None:
    """`docker build` through the Engine API (classic builder, works offline)."""
    started = time.monotonic()
    log: list[str] = []
    error = ""
    import docker.errors

    try:
        for chunk in api.build(path=str(context_dir), tag=ref, dockerfile=dockerfile, rm=True, forcerm=True,
                               labels=labels or {}, decode=True, pull=False):
            if "stream" in chunk:
                log.append(str(chunk["stream"]))
            if "error" in chunk:
                error = str(chunk["error"])
    except docker.errors.APIError as exc:  # the daemon refused the build (a Dockerfile it cannot parse)
        error = str(exc.explanation or exc)
    except docker.errors.DockerException as exc:  # the context could not be sent (a file that cannot be read)
        error = f"{type(exc).__name__}: {exc}"
    except OSError as exc:
        error = f"the build context could not be read: {exc}"
    if error:
        tail = "".join(log)[-1500:]
        hint = unpullable_base_hint(error, context_dir / dockerfile)
        raise ImageError(f"building {ref} failed: {error.strip()}{hint}\n{tail}", image=ref,
                         seconds=time.monotonic() - started)


_PULL_ERRORS = ("pull access denied", "manifest unknown", "not found: manifest", "failed to resolve",
                "no such host", "dial tcp", "lookup ", "i/o timeout", "connection refused", "repository does not exist",
                "failed to do request", "tls handshake", "unauthorized", "toomanyrequests")


def unpullable_base_hint(error: str, dockerfile: Path) -> str:
    """A hint when the build failed fetching its FROM image (nothing can be pulled here), else ""."""
    if not any(marker in error.lower() for marker in _PULL_ERRORS):
        return ""
    from rlkit.config.files import FileReadError, read_bytes

    bases = []
    try:
        text = read_bytes(dockerfile, max_bytes=2**20, root=dockerfile.parent).decode("utf-8", "replace")
    except FileReadError:
        text = ""
    if text:
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].upper() == "FROM":
                bases.append(next((p for p in parts[1:] if not p.startswith("--")), ""))
    base = f" ({', '.join(bases)})" if bases else ""
    return (f"\n    hint: the Dockerfile's base image{base} is not on this docker host and no registry can be "
            "reached here: build it offline (`rlkit images base` makes rlkit/base:bookworm) or `docker load` it, "
            "then start FROM it")


def _push(api, outcome: BuildOutcome) -> BuildOutcome:
    error = ""
    for chunk in api.push(outcome.image, stream=True, decode=True):
        if "error" in chunk:
            error = chunk["error"]
    if error:
        return BuildOutcome(outcome.task_id, outcome.image, "failed", f"push: {error}")
    return BuildOutcome(outcome.task_id, outcome.image, "pushed")
