"""Agents' images, and baking them into task images (AGENT_DELIVERY=bake; by default the agent's tree is
mounted from one volume instead: `rlkit.scaffolds.mount`, `rlkit.sandbox.agent_volume`).

1. `build_agent_image(scaffold)` stages the agent on the host (npm / pip reach their
   registries from the host; containers see an intercepting TLS proxy) and builds
   `rlkit/agent-<scaffold>:<version>` holding /opt/rlkit-agents/<scaffold>/...
   - cc, oc: the npm packages ship one native binary per platform; only that binary
     is copied (no node in the image).
   - ohsdk: the SDK needs Python >= 3.12 and bookworm has 3.11, so the host's CPython
     3.12 is copied in, and /opt/openhands-sdk-venv (where harbor's agent looks) is
     created from it offline around a site-packages installed on the host (uv, else pip).
     Only what a trial imports is byte-compiled: the build imports what harbor's runner
     imports, and compiles the agent's and its LLM client's packages whole (lazy imports).
     From cold caches on 2 cores: 0.58x the wall and 0.66x the CPU of a pip wheelhouse
     installed inside the build (bench/agent_image.py).
2. `build_scaffold_image(task_image, scaffold)` is `FROM <task image>` plus
   `COPY --from=rlkit/agent-<scaffold>` and a symlink: seconds per task.

harbor's agents then find the agent installed (`skip_install` plus their version
checks), so a trial pays nothing for it. Each task's layer stores the whole agent again (docker keys a
layer by its chain, so one COPY on another base is a new layer): ohsdk 0.57 GiB, cc 0.37 GiB, oc 0.17 GiB
a task. `scaffold_layer` stops baking before a layer would leave docker's disk under DISK_RESERVE_BYTES.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.errors import ImageError, UserError
from rlkit.sandbox.base_image import BASE_IMAGE
from rlkit.scaffolds.agent_image import (  # noqa: F401  (re-exported: the agent image's names live there)
    AGENT_LAYOUT,
    AGENTS_ROOT,
    OHSDK_VENV,
    _agent_version,
    agent_image_ref,
    agent_links,
    agent_mount,
)

if TYPE_CHECKING:
    from rlkit.scaffolds.base import Scaffold

_CHECKOUT = Path(__file__).resolve().parents[2]
CACHE_DIR = _CHECKOUT / ".rlkit" / "cache" / "agents"
_UV = _CHECKOUT / ".rlkit" / "uv" / "bin" / "uv"  # scripts/setup.sh installs it
_UV_ARGS = _CHECKOUT / "scripts" / "uv_args.py"  # pip's indexes, find-links and constraints, as uv flags
AGENT_LABEL = "rlkit.agent-image"  # on a task's scaffold layer: the id of the agent image it copied
_OHSDK_ROOT = f"{AGENTS_ROOT}/ohsdk"
_OHSDK_SITE = f"{_OHSDK_ROOT}/venv/lib/python3.12/site-packages"
# What harbor's openhands_sdk_runner.py imports: their bytecode is written at build time, so no trial
# compiles them. The agent and its LLM client import submodules lazily; those two are compiled whole.
_OHSDK_RUNNER_IMPORTS = ("openhands.sdk", "openhands.sdk.context", "openhands.sdk.event",
                         "openhands.tools.file_editor", "openhands.tools.task_tracker", "openhands.tools.terminal")
_OHSDK_COMPILED_WHOLE = ("openhands", "litellm")

Log = Callable[[str], None]


def scaffold_image_ref(task_image: str, scaffold_name: str) -> str:
    """The task image with a scaffold baked in: tag `latest` becomes `<scaffold>` (as in
    `task_image_ref(task_id, variant=scaffold)`), any other tag gets `-<scaffold>`."""
    repo, _, tag = task_image.rpartition(":") if ":" in task_image.split("/")[-1] else (task_image, "", "latest")
    return f"{repo}:{scaffold_name}" if tag == "latest" else f"{repo}:{tag}-{scaffold_name}"


def _run(cmd: list[str], *, cwd: Path | None = None, what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, check=False, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise ImageError(f"{what} failed ({proc.returncode}):\n{tail}", command=" ".join(cmd))
    return proc.stdout


def image_exists(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], check=False, capture_output=True).returncode == 0


def layer_is_current(ref: str, task_image: str, scaffold: Scaffold) -> bool:
    """`ref` exists, was layered on the task image as its sources are now, and holds the agent image
    as it is now (a rebuilt or re-pinned agent re-layers every task; an agent image pruned since is
    no reason to)."""
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.images import SOURCE_LABEL, image_id, inspect_labels

    api = api_client()
    labels = inspect_labels(api, ref)
    if labels is None or labels.get(SOURCE_LABEL) != (inspect_labels(api, task_image) or {}).get(SOURCE_LABEL):
        return False
    agent_id = image_id(api, agent_image_ref(scaffold))
    return agent_id is None or labels.get(AGENT_LABEL) == agent_id


def _stage_npm(scaffold: Scaffold, stage: Path, log: Log) -> None:
    recipe = scaffold.image_recipe
    assert recipe is not None and recipe.npm_package and recipe.npm_binary
    npm_dir = CACHE_DIR / scaffold.name / f"npm-{recipe.npm_version}"
    binary = npm_dir / recipe.npm_binary
    if not binary.exists():
        if shutil.which("npm") is None:
            raise UserError("npm is not installed on this host", fix="apt-get install npm (or nodejs)")
        log(f"… npm install {recipe.npm_package}@{recipe.npm_version}")
        npm_dir.mkdir(parents=True, exist_ok=True)
        _run(["npm", "install", "--prefix", str(npm_dir), "--no-audit", "--no-fund",
              f"{recipe.npm_package}@{recipe.npm_version}"], what="npm install")
        if not binary.exists():
            raise ImageError(f"{recipe.npm_package} did not ship {recipe.npm_binary} for this platform")
    target = stage / scaffold.name
    target.mkdir(parents=True)
    shutil.copy2(binary, target / binary.name)


def _host_python312() -> Path:
    """Prefix of a self-contained CPython 3.12 on this host (the one under rlkit's venv)."""
    prefix = Path(sys.base_prefix)
    if sys.version_info[:2] != (3, 12):
        raise UserError("baking ohsdk needs rlkit to run on CPython 3.12", fix="use the .venv from scripts/setup.sh")
    # A distro python shares its prefix with the whole OS: copying it is not an option.
    if str(prefix) in {"/", "/usr", "/usr/local"} or not (prefix / "lib" / "python3.12" / "os.py").is_file():
        raise UserError(f"the CPython 3.12 at {prefix} is not a self-contained install",
                        fix="create rlkit's venv from a standalone CPython 3.12 (pyenv or a python-build-standalone "
                            "tree), as scripts/setup.sh does")
    return prefix


def _site_install_command(python: Path, target: Path, requirements: tuple[str, ...]) -> tuple[list[str], dict]:
    """Install into a bare folder for `python`: uv where setup.sh put it (parallel downloads, its cache),
    else pip. Neither compiles bytecode: the image build compiles what trials import."""
    env = dict(os.environ)
    if _UV.is_file() and _UV_ARGS.is_file():
        flags = _run([str(python), str(_UV_ARGS)], what="scripts/uv_args.py").split()
        cert = _run([str(python), str(_UV_ARGS), "--cert"], what="scripts/uv_args.py --cert").strip()
        if cert and "SSL_CERT_FILE" not in env:
            env["SSL_CERT_FILE"] = cert
        return [str(_UV), "pip", "install", "-q", "--python", str(python), "--target", str(target),
                "--link-mode", "copy", *flags, *requirements], env
    return [str(python), "-m", "pip", "install", "-q", "--no-compile", "--target", str(target), *requirements], env


def _stage_ohsdk(scaffold: Scaffold, stage: Path, log: Log) -> None:
    recipe = scaffold.image_recipe
    assert recipe is not None
    python_prefix = _host_python312()
    python = python_prefix / "bin" / "python3.12"
    site = CACHE_DIR / scaffold.name / f"site-{_agent_version(scaffold)}"
    done = site / ".complete"
    if not done.exists():
        shutil.rmtree(site, ignore_errors=True)
        command, env = _site_install_command(python, site, recipe.pip_requirements)
        log(f"… {Path(command[0]).name} install {' '.join(recipe.pip_requirements)} (host, python {python_prefix})")
        _run(command, what=f"{Path(command[0]).name} install", env=env)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts name the host's python; trials run -m
        done.touch()
    log("… staging CPython 3.12 and the site-packages")
    shutil.copytree(python_prefix, stage / "python", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "test", "tests", "idlelib", "tkinter",
                                                  "turtledemo", "*.a"))
    relocate_runpath(stage / "python" / "bin" / "python3.12", str(python_prefix / "lib"))
    shutil.copytree(site, stage / "site", symlinks=True, ignore=shutil.ignore_patterns(".complete", "__pycache__"))


ORIGIN_LIB = b"$ORIGIN/../lib"


def relocate_runpath(binary: Path, old_lib: str) -> bool:
    """Point the copied interpreter's RUNPATH (the host prefix's lib/) at `$ORIGIN/../lib`, in place, so
    it finds libpython wherever its tree is mounted: no loader configuration in the sandbox (which the
    verifier would have to judge). False where the binary names no such RUNPATH (nothing to do)."""
    data = binary.read_bytes()
    needle = b"\0" + old_lib.encode() + b"\0"
    if data.count(needle) != 1 or len(old_lib) < len(ORIGIN_LIB):
        return False
    padded = b"\0" + ORIGIN_LIB + b"\0" * (len(needle) - len(ORIGIN_LIB) - 1)
    binary.write_bytes(data.replace(needle, padded))
    return True


def _dockerfile_npm(scaffold: Scaffold) -> str:
    return f"FROM {BASE_IMAGE}\nCOPY {scaffold.name} {AGENTS_ROOT}/{scaffold.name}\n"


def _dockerfile_ohsdk(scaffold: Scaffold) -> str:
    recipe = scaffold.image_recipe
    assert recipe is not None
    python = f"{_OHSDK_ROOT}/python"
    env = " ".join(f"{key}={value}" for key, value in recipe.offline_env.items())
    whole = " ".join(f"{_OHSDK_SITE}/{package}" for package in _OHSDK_COMPILED_WHOLE)
    return (
        f"FROM {BASE_IMAGE}\n"
        f"COPY python {python}\n"
        f"COPY site {_OHSDK_SITE}\n"
        # The venv lives in the agent's tree (one volume); /opt/openhands-sdk-venv links to it, as in trials.
        f"RUN {python}/bin/python3.12 -m venv --without-pip {_OHSDK_ROOT}/venv \\\n"
        f" && ln -s {_OHSDK_ROOT}/venv {OHSDK_VENV} \\\n"
        f" && {OHSDK_VENV}/bin/python -m compileall -q -j 0 {whole} \\\n"
        # As trials run it, offline (litellm's import otherwise spends 3 s retrying a price-list
        # download); the import writes the bytecode of everything else a trial imports.
        f" && env {env} {OHSDK_VENV}/bin/python -c 'import {', '.join(_OHSDK_RUNNER_IMPORTS)}'\n"
    )


def build_agent_image(name: str, *, force: bool = False, log: Log = print) -> str:
    """Build (or reuse) `rlkit/agent-<name>:<version>`; returns its reference."""
    from rlkit.scaffolds import get_scaffold

    scaffold = get_scaffold(name)
    ref = agent_image_ref(scaffold)
    from filelock import FileLock

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Two builds at once (test workers, a run beside `rlkit images`) would npm-install into the
    # same cache folder and pull each other's files away mid-install: one at a time per agent.
    with FileLock(CACHE_DIR / f".{name}.lock"):
        if not force and image_exists(ref):
            log(f"✓ {ref} is up to date")
            return ref
        return _build_agent_image(scaffold, ref, log)


def _build_agent_image(scaffold: Scaffold, ref: str, log: Log) -> str:
    name = scaffold.name
    recipe = scaffold.image_recipe
    assert recipe is not None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"rlkit-agent-{name}-") as tmp:
        ctx = Path(tmp)
        if not image_exists(BASE_IMAGE):
            raise UserError(f"{BASE_IMAGE} is missing", fix="run `rlkit images base` first")
        if recipe.npm_package:
            _stage_npm(scaffold, ctx, log)
            dockerfile = _dockerfile_npm(scaffold)
        else:
            _stage_ohsdk(scaffold, ctx, log)
            dockerfile = _dockerfile_ohsdk(scaffold)
        (ctx / "Dockerfile").write_text(dockerfile)
        log(f"… docker build {ref}")
        _run(["docker", "build", "-q", "--network", "none", "-t", ref, "--label", f"rlkit.agent={name}",
              str(ctx)], what=f"docker build {ref}")
    log(f"✓ built {ref} in {time.monotonic() - started:.0f}s")
    return ref


def scaffold_layer_dockerfile(task_image: str, scaffold: Scaffold, agent_id: str = "") -> str:
    """The per-task layer (AGENT_DELIVERY=bake): copy the agent's tree in, make the links a mounted agent
    gets at sandbox start."""
    agent = agent_image_ref(scaffold)
    root = f"{AGENTS_ROOT}/{scaffold.name}"
    lines = [f"FROM {task_image}", f"COPY --from={agent} {root} {root}"]
    links = [f"mkdir -p {os.path.dirname(path)} && ln -sfn {target} {path}"
             for path, target in agent_links(scaffold).items()]
    if links:
        lines.append("RUN " + " && ".join(links))
    lines.append(f"LABEL rlkit.scaffold={scaffold.name}" + (f" {AGENT_LABEL}={agent_id}" if agent_id else ""))
    return "\n".join(lines) + "\n"


def build_scaffold_image(task_image: str, name: str, *, force: bool = False, log: Log = print) -> str:
    """`<task image>-<scaffold>`: the task image with the agent baked in. Returns its reference."""
    from rlkit.scaffolds import get_scaffold

    scaffold = get_scaffold(name)
    if scaffold.image_recipe is None:
        log(f"✓ {name} runs on the host; {task_image} is used as it is")
        return task_image
    ref = scaffold_image_ref(task_image, name)
    if not force and layer_is_current(ref, task_image, scaffold):
        log(f"✓ {ref} is up to date")
        return ref
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.images import image_id

    agent_id = image_id(api_client(), build_agent_image(name, log=log)) or ""
    with tempfile.TemporaryDirectory(prefix="rlkit-scaffold-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(scaffold_layer_dockerfile(task_image, scaffold, agent_id))
        _run(["docker", "build", "-q", "--network", "none", "-t", ref, tmp], what=f"docker build {ref}")
    log(f"✓ built {ref}")
    return ref


GB = 1024 ** 3
DISK_RESERVE_BYTES = 2 * GB  # a full disk breaks dockerd itself, and every sandbox beside the build


def agent_payload_bytes(api, scaffold: Scaffold) -> int | None:
    """What one task's layer of `scaffold` stores: its agent image less the base it was built on."""
    from rlkit.sandbox.images import image_size

    agent = image_size(api, agent_image_ref(scaffold))
    if agent is None:
        return None
    recipe = scaffold.image_recipe
    on_base = recipe is not None  # every agent image is built FROM the base image
    return agent - ((image_size(api, BASE_IMAGE) or 0) if on_base else 0)


def docker_free_bytes(api) -> tuple[str, int] | None:
    """Docker's data root and the bytes free there; None where this host cannot see it (a daemon reached over
    tcp or ssh: its data root's path names a folder on another machine)."""
    if getattr(api, "base_url", "") != "http+docker://localhost":
        return None
    try:
        root = api.info().get("DockerRootDir")
        return (root, shutil.disk_usage(root).free) if root else None
    except OSError:
        return None


def disk_refusal(name: str, payload: int, root: str, free: int) -> str | None:
    """Why the next `name` layer must not be built (None: there is room), with what to do instead."""
    if free - payload >= DISK_RESERVE_BYTES:
        return None
    return (f"no room for another {name} layer: each stores {payload / GB:.2f} GiB and docker's data root "
            f"{root} has {free / GB:.1f} GiB free (baking stops {DISK_RESERVE_BYTES / GB:.0f} GiB short of full); "
            f"free space there (`docker image prune`, other runs' task images), move docker's data-root to a "
            f"larger disk, or bake fewer tasks")


def push_image(ref: str) -> None:
    _run(["docker", "push", ref], what=f"docker push {ref}")


def scaffold_layer(name: str, *, force: bool = False, push: bool = False,
                   log: Log = print) -> Callable[[str, object], object]:
    """The `layer` hook of `rlkit.sandbox.images.build_task_images` for `--scaffold NAME`.

    With `push`, the layered image goes to the same registry as the task image."""
    from rlkit.sandbox.images import BuildOutcome
    from rlkit.scaffolds import get_scaffold


    scaffold = get_scaffold(name)  # unknown names fail before any build
    payload: int | None = None  # what one task's layer stores, once the agent image exists
    said = False

    def room_for_one(task_id: str, ref: str) -> BuildOutcome | None:
        nonlocal payload, said
        from rlkit.sandbox.docker_api import api_client

        api = api_client()
        if payload is None:  # the agent image is built once, before the first layer needs it
            payload = agent_payload_bytes(api, scaffold)
            if payload is None:
                build_agent_image(name, log=log)
                payload = agent_payload_bytes(api, scaffold) or 0
        seen = docker_free_bytes(api)
        if seen is None:
            return None
        root, free = seen
        refusal = disk_refusal(name, payload, root, free)
        if refusal:
            return BuildOutcome(task_id, ref, "failed", refusal)
        if not said:
            said = True
            log(f"… each {name} layer stores {payload / GB:.2f} GiB in {root} ({free / GB:.1f} GiB free: room "
                f"for ~{(free - DISK_RESERVE_BYTES) // max(payload, 1)} layers)")
        return None

    def layer(task_image: str, spec: object) -> BuildOutcome:
        task_id = str(getattr(spec, "task_id", task_image))
        if scaffold.image_recipe is None:
            return BuildOutcome(task_id, task_image, "skipped", f"{name} runs on the host: no agent layer")
        ref = scaffold_image_ref(task_image, name)
        existed = layer_is_current(ref, task_image, scaffold)
        try:
            if force or not existed:
                refused = room_for_one(task_id, ref)
                if refused is not None:
                    return refused
            ref = build_scaffold_image(task_image, name, force=force, log=log)
            if push:
                push_image(ref)
        except ImageError as exc:
            return BuildOutcome(task_id, ref, "failed", exc.message)
        if push:
            return BuildOutcome(task_id, ref, "pushed")
        return BuildOutcome(task_id, ref, "cached" if existed and not force else "built")

    return layer
