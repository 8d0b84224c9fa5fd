"""Find and remove what a crashed or interrupted run left behind.

Sandboxes are found by their labels (rlkit.managed=1, optionally one project /
experiment) on docker and, when a cluster is configured, on kubernetes. With
`processes=True` it also stops Ray (`ray stop --force`) and kills our processes still
listening on the proxy port (orphaned litellm/vLLM/proxy workers keep holding PROXY_PORT).
Safe to re-run, and safe when nothing is up: a second run finds nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.schema import DEFAULT_PROXY_PORT
from rlkit.sandbox import labels as L

# Command-line fragments of processes rlkit itself starts; only these are killed on the port.
OUR_PROCESS_MARKERS = ("rlkit", "vllm", "litellm", "uvicorn", "ray::")


@dataclass
class Removed:
    kind: str  # container | pod | process | ray
    name: str
    detail: str = ""


@dataclass
class CleanupReport:
    removed: list[Removed] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # something could not be removed
    warnings: list[str] = field(default_factory=list)  # left alone on purpose, or not reachable
    dry_run: bool = False

    @property
    def nothing_done(self) -> bool:
        return not self.removed and not self.errors


def _describe(labels: dict[str, str]) -> str:
    keys = (L.PROJECT, L.EXPERIMENT, L.STEP, L.SESSION)
    return " ".join(f"{k.split('.', 1)[1]}={labels[k]}" for k in keys if labels.get(k))


# ---- docker -------------------------------------------------------------------------------------
def docker_sandboxes(project: str | None = None, experiment: str | None = None) -> list[dict]:
    """Labelled containers (running or not) as Engine API summaries."""
    from rlkit.sandbox.docker_api import api_client

    wanted = [f"{k}={v}" for k, v in L.selector(project, experiment).items()]
    return api_client().containers(all=True, filters={"label": wanted})


def clean_docker(report: CleanupReport, project: str | None, experiment: str | None) -> None:
    import docker.errors

    from rlkit.sandbox.docker_api import api_client

    api = api_client()
    for summary in docker_sandboxes(project, experiment):
        name = (summary.get("Names") or [summary["Id"][:12]])[0].lstrip("/")
        detail = _describe(summary.get("Labels") or {})
        if not report.dry_run:
            try:
                api.remove_container(summary["Id"], force=True, v=True)
            except docker.errors.NotFound:
                continue  # removed concurrently (its trial finished)
            except docker.errors.APIError as exc:
                report.errors.append(f"container {name}: {exc.explanation or exc}")
                continue
        report.removed.append(Removed("container", name, detail))


# ---- kubernetes -----------------------------------------------------------------------------------
def k8s_configured() -> bool:
    """A cluster is configured: in-cluster service account, $KUBECONFIG, or ~/.kube/config."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG")
                or (Path.home() / ".kube" / "config").is_file())


def clean_k8s(report: CleanupReport, project: str | None, experiment: str | None,
              namespace: str | None = None, core_api: object | None = None) -> None:
    """Delete labelled pods in `namespace` (default $RLKIT_K8S_NAMESPACE or "rlkit")."""
    from rlkit.sandbox.k8s import delete_labelled_pods, load_core_api

    api = core_api or load_core_api()
    namespace = namespace or os.environ.get("RLKIT_K8S_NAMESPACE", "rlkit")
    for pod_name, pod_labels in delete_labelled_pods(api, namespace, L.selector(project, experiment),
                                                     dry_run=report.dry_run):
        report.removed.append(Removed("pod", f"{namespace}/{pod_name}", _describe(pod_labels)))


# ---- processes ------------------------------------------------------------------------------------
def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def pids_listening_on(port: int) -> list[int]:
    """Pids holding a listening socket on `port` (those this user can see)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                pids.append(int(entry.name))
                break
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def clean_port(report: CleanupReport, port: int = DEFAULT_PROXY_PORT) -> None:
    import signal

    for pid in pids_listening_on(port):
        if pid == os.getpid():
            continue
        cmd = _cmdline(pid)
        if not any(marker in cmd for marker in OUR_PROCESS_MARKERS):
            report.warnings.append(f"port {port} is held by pid {pid} ({cmd[:80]}), not ours; left alone")
            continue
        if not report.dry_run:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        report.removed.append(Removed("process", str(pid), f"port {port}: {cmd[:80]}"))


def clean_ray(report: CleanupReport) -> None:
    ray = shutil.which("ray")
    if ray is None or not _ray_running():
        return
    if not report.dry_run:
        subprocess.run([ray, "stop", "--force"], check=False, capture_output=True, timeout=120)
    report.removed.append(Removed("ray", "ray", "ray stop --force"))


def _ray_running() -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and ("raylet" in _cmdline(int(entry.name)) or "gcs_server" in
                                     _cmdline(int(entry.name))):
            return True
    return False


# ---- entry point ---------------------------------------------------------------------------------
def cleanup(project: str | None = None, experiment: str | None = None, *, dry_run: bool = False,
            docker: bool = True, k8s: bool | None = None, processes: bool = False,
            port: int = DEFAULT_PROXY_PORT, namespace: str | None = None,
            log: Callable[[str], None] | None = None) -> CleanupReport:
    """Remove labelled sandboxes (and with `processes`, stale Ray / proxy-port processes)."""
    from rlkit.sandbox.dockerd import dockerd_answers

    report = CleanupReport(dry_run=dry_run)
    # No daemon answering means no containers to clean; never start one just for cleanup.
    if docker and dockerd_answers():
        clean_docker(report, project, experiment)
    if k8s_configured() if k8s is None else k8s:
        try:
            clean_k8s(report, project, experiment, namespace=namespace)
        except Exception as exc:  # noqa: BLE001 — an unreachable cluster must not stop docker cleanup
            report.warnings.append(f"kubernetes not cleaned: {str(exc)[:200]}")
    if processes:
        clean_port(report, port)
        clean_ray(report)
    if log:
        verb = "would remove" if dry_run else "removed"
        for item in report.removed:
            log(f"{verb} {item.kind} {item.name}" + (f"  ({item.detail})" if item.detail else ""))
        for error in report.errors:
            log(f"✗ {error}")
        for warning in report.warnings:
            log(f"⚠ {warning}")
        if report.nothing_done:
            log("nothing to clean")
    return report
