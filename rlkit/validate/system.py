"""World checks on this machine: existing artifacts, the sandbox backend, ports and disk.

No client libraries are imported: the docker daemon is pinged over its socket, the kube
config is read as YAML (rlkit.config.files: bounded, shape checked by KubeConfig) and its
API server reached with a TCP connect.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from rlkit.config.files import FileReadError, clip, exists, present, read_int, read_yaml, validate_model
from rlkit.config.paths import RunPaths
from rlkit.config.schema import Backend, ResumeMode
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

CLEANUP = "bash scripts/cleanup_before_run.sh"


def output_root(ctx: Context) -> Path:
    return ctx.resolved.path("OUTPUT_DIR") or ctx.resolved.root


def artifacts(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    if not c.PROJECT_NAME or not c.EXP_NAME:
        return [skip("artifacts", "PROJECT_NAME / EXP_NAME unset")]
    root = output_root(ctx)
    run = RunPaths(root, c.PROJECT_NAME, c.EXP_NAME)  # the same names the trainers write
    ckpt = run.checkpoints
    found = [p for p in (run.console_log, run.jsonl, ckpt, run.trials) if exists(p)]
    if not found:
        return [ok("artifacts", f"fresh run: nothing yet under {root} for {c.PROJECT_NAME}/{c.EXP_NAME}")]
    latest = ckpt / "latest_checkpointed_iteration.txt"
    try:
        step = str(read_int(latest, lo=0, hi=10**9)) if present(latest) else ""
    except FileReadError as exc:
        return [warn("artifacts", f"unreadable checkpoint marker: {exc.message}", "delete it, or pick a new "
                     "EXP_NAME", key="EXP_NAME", where=ctx.resolved.where("EXP_NAME"))]
    listed = ", ".join(str(p.relative_to(root)) for p in found)
    where = ctx.resolved.where("EXP_NAME")
    if step and c.RESUME_MODE is ResumeMode.AUTO:
        return [ok("artifacts", f"resume: {c.EXP_NAME} continues from global_step_{step} ({listed})")]
    if step:
        return [warn("artifacts", f"clobber: RESUME_MODE=disable restarts {c.EXP_NAME} over a checkpoint at "
                     f"global_step_{step} ({listed})", "pick a new EXP_NAME to keep the old run, or set "
                     "RESUME_MODE=auto to continue it", key="EXP_NAME", where=where)]
    return [warn("artifacts", f"clobber: {listed} exist(s) without a checkpoint; the new run appends to / "
                 "overwrites them", "pick a new EXP_NAME, or delete the old artifacts", key="EXP_NAME",
                 where=where)]


def _docker_ping(address: str, timeout: float = 1.0) -> str | None:
    """None when the daemon answers /_ping, else the reason."""
    url = urlparse(address)
    try:
        if url.scheme in ("unix", ""):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: object = url.path or address
        elif url.scheme in ("tcp", "http"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = (url.hostname or "localhost", url.port or 2375)
        else:
            return f"unsupported DOCKER_HOST scheme {url.scheme!r}"
        sock.settimeout(timeout)
        with sock:
            sock.connect(target)  # type: ignore[arg-type]
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(1024).decode(errors="replace")
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    except (ValueError, UnicodeError) as exc:  # a port out of range, a host name IDNA cannot encode
        return f"bad address ({exc})"
    if " 200 " in reply.split("\r\n", 1)[0] and reply.rstrip().endswith("OK"):
        return None
    return f"unexpected answer {reply[:60]!r}"


class _KubeCluster(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    server: StrictStr | None = None


class _KubeClusterEntry(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    name: StrictStr
    cluster: _KubeCluster | None = None


class _KubeContext(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    cluster: StrictStr | None = None


class _KubeContextEntry(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    name: StrictStr
    context: _KubeContext | None = None


class KubeConfig(BaseModel):
    """The parts of a kube config the backend check reads (the kubernetes client reads the rest)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    current_context: StrictStr | None = Field(None, alias="current-context")
    contexts: list[_KubeContextEntry] | None = None
    clusters: list[_KubeClusterEntry] | None = None


def _kube_check(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    where = ctx.resolved.where("KUBECONFIG")
    path = ctx.resolved.path("KUBECONFIG")
    regen = "fix or regenerate the kube config (e.g. your cloud CLI's get-credentials)"

    def bad(message: str, fix: str = regen) -> list[Finding]:
        return [fatal("backend", message, fix, key="KUBECONFIG", where=where)]

    if path is None or not present(path):
        return bad(f"BACKEND=k8s but the kube config {path} does not exist",
                   "set KUBECONFIG (site.env or the environment) to your cluster's config")
    try:
        data = read_yaml(path)
        if not isinstance(data, dict):
            return bad(f"{path} is not a kube config: it holds a YAML {type(data).__name__}, not a mapping")
        kube = validate_model(data, KubeConfig, path, fix=regen)
    except FileReadError as exc:
        return bad(f"kube config {exc.message}", exc.fix or regen)
    contexts = {e.name: e.context or _KubeContext() for e in kube.contexts or []}
    current = kube.current_context
    if current is None or current not in contexts:
        return bad(f"{path}: current-context {clip(repr(current), 80)} is not among its contexts",
                   "kubectl config use-context NAME")
    clusters = {e.name: e.cluster or _KubeCluster() for e in kube.clusters or []}
    cluster = clusters.get(contexts[current].cluster or "")
    server = cluster.server if cluster else None
    if not server:
        return bad(f"{path}: context {clip(current, 80)!r} has no cluster with a server address")
    ns = c.K8S_NAMESPACE
    if not ns or not all(ch.isalnum() or ch == "-" for ch in ns) or ns != ns.lower() or len(ns) > 63:
        return [fatal("backend", f"K8S_NAMESPACE={ns!r} is not a valid namespace name",
                      "lower-case letters, digits and '-'", key="K8S_NAMESPACE",
                      where=ctx.resolved.where("K8S_NAMESPACE"))]
    try:
        url = urlparse(server)
        host, port = url.hostname or "", url.port or 443
        with socket.create_connection((host, port), timeout=2):
            pass
    except (OSError, ValueError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return bad(f"kubernetes API {clip(server, 120)} of context {clip(current, 80)!r} is unreachable "
                   f"({clip(reason, 80)})", "check the VPN / cluster, or use BACKEND=docker")
    return [ok("backend", f"kubernetes API {clip(server, 120)} reachable (context {clip(current, 80)}, "
               f"namespace {ns})")]


def backend(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    if c.BACKEND is Backend.K8S:
        return _kube_check(ctx)
    reason = _docker_ping(c.DOCKER_HOST)
    if reason:
        return [fatal("backend", f"docker daemon not reachable at {c.DOCKER_HOST} ({reason})",
                      "start it (sudo dockerd &, or systemctl start docker), or set DOCKER_HOST",
                      key="BACKEND", where=ctx.resolved.where("BACKEND"))]
    return [ok("backend", f"docker daemon answers at {c.DOCKER_HOST}")]


SANDBOXES_PER_CPU = 8  # agent sandboxes mostly wait on the model; past this the CPU is the queue


def capacity(ctx: Context) -> list[Finding]:
    """Counts the machine can hold: docker sandboxes run here, so MAX_SANDBOXES is bounded by its CPUs."""
    c = ctx.resolved.config
    if c.BACKEND is not Backend.DOCKER:
        return [skip("capacity", "BACKEND=k8s: sandboxes run on the cluster's nodes")]
    if "MAX_SANDBOXES" in ctx.resolved.bad_keys:
        return [skip("capacity", "MAX_SANDBOXES is not usable (see types)")]
    cpus = os.cpu_count() or 1
    most = cpus * SANDBOXES_PER_CPU
    if c.MAX_SANDBOXES > most:
        return [warn("capacity", f"MAX_SANDBOXES={c.MAX_SANDBOXES} docker sandboxes at once on a machine with "
                     f"{cpus} CPU(s): beyond {most} ({SANDBOXES_PER_CPU} per CPU) they only queue for the CPU",
                     f"set MAX_SANDBOXES to {most} or less", key="MAX_SANDBOXES",
                     where=ctx.resolved.where("MAX_SANDBOXES"))]
    return [ok("capacity", f"MAX_SANDBOXES={c.MAX_SANDBOXES} on {cpus} CPU(s)")]


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def ports(ctx: Context) -> list[Finding]:
    from rlkit.config.schema import Trainer
    from rlkit.launch.plan import free_port, is_head_node, private_ray

    c = ctx.resolved.config
    wanted = {"PROXY_PORT": c.PROXY_PORT, "DASHBOARD_PORT": c.DASHBOARD_PORT}
    if c.TRAINER is Trainer.VERL:  # verl's agent-loop workers each run a proxy on a free port
        wanted.pop("PROXY_PORT")
    # A one-machine run's Ray (either trainer's) takes free ports; only a cluster's head binds RAY_PORT.
    if c.TRAINER is Trainer.VERL and is_head_node(c.RAY_HEAD_ADDRESS) and not private_ray(c.RAY_HEAD_ADDRESS, c.NNODES):
        wanted["RAY_PORT"] = c.RAY_PORT
    busy = [(k, p) for k, p in wanted.items() if port_in_use(p)]
    if busy:
        return [fatal("ports", f"{k}={p} is already in use", f"stop what holds it ({CLEANUP}; `ss -ltnp "
                      f"'sport = :{p}'` shows the process), or set {k}={free_port('0.0.0.0')} "
                      "(free now: a second run on this machine needs its own)", key=k, where=ctx.resolved.where(k))
                for k, p in busy]
    return [ok("ports", "free: " + ", ".join(f"{k}={p}" for k, p in wanted.items()))]


def checkpoint_bytes(weight_bytes: int, config: dict) -> int:
    """One verl checkpoint: fp32 model shards + two fp32 Adam moments + an HF copy of the weights."""
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    per_param = 4 if "32" in dtype else 2
    params = weight_bytes // per_param
    return params * 12 + weight_bytes


def disk(ctx: Context) -> list[Finding]:
    from rlkit.validate.model import ModelDirError, model_info

    info = model_info(ctx)
    if isinstance(info, ModelDirError):
        return [skip("disk", "no model directory to size checkpoints from")]
    target = output_root(ctx) / "checkpoints"
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    need = checkpoint_bytes(info.weight_bytes, info.config)
    gib = 2**30
    msg = f"{free / gib:.1f} GiB free at {probe}, ~{need / gib:.2f} GiB per checkpoint"
    if free < need:
        return [fatal("disk", msg, "free space or set OUTPUT_DIR to a larger disk", key="OUTPUT_DIR",
                      where=ctx.resolved.where("OUTPUT_DIR"))]
    if free < 3 * need:
        return [warn("disk", msg + " (room for fewer than 3)", "free space, or save less often "
                     "(TRAINER_SAVE_FREQ)", key="TRAINER_SAVE_FREQ")]
    return [ok("disk", msg)]
