"""Find and remove what a crashed or interrupted run left behind: orphans only, and only yours.

Sandboxes are found by their labels (rlkit.managed=1, optionally one project / experiment) on
docker and, when a cluster is configured, on kubernetes; each is judged by its owner labels
(rlkit.ops.ownership): only orphans of this user are removed. A live run's sandboxes go only
when that run is named (`experiment`) and `force` is set; other users' only with `other_users`.
With `processes=True` it stops rlkit's orphaned server processes (vLLM, proxy / litellm workers,
dashboard, Ray daemons; rlkit.ops.procs) wherever they listen, names what still holds the ports,
and with `tmp=True` clears stale leftovers on disk (rlkit.ops.tmpfiles: vLLM sockets and scratch
folders, dead Ray sessions) and the locks of runs whose trainer and reaper both died.
Given a project, every part is scoped to that project's runs (tests always pass one: a cleanup
never touches what its caller did not make). Safe to re-run, and safe when nothing is up: a
second run finds nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.ops.ownership import Verdict, verdict
from rlkit.sandbox import labels as L


@dataclass
class Removed:
    kind: str  # container | pod | volume | process | tmp | lock
    name: str
    detail: str = ""


@dataclass
class CleanupReport:
    removed: list[Removed] = field(default_factory=list)
    kept: list[Removed] = field(default_factory=list)  # seen and left alone on purpose (live, another user's)
    errors: list[str] = field(default_factory=list)  # something could not be removed
    warnings: list[str] = field(default_factory=list)  # not ours, or not reachable
    dry_run: bool = False

    @property
    def nothing_done(self) -> bool:
        return not self.removed and not self.errors

    def as_dict(self) -> dict:
        """`rlkit cleanup --json`: what went (or would go), what stayed and why, errors and warnings."""
        def items(found: list[Removed]) -> list[dict[str, str]]:
            return [{"kind": r.kind, "name": r.name, "detail": r.detail} for r in found]

        return {"dry_run": self.dry_run, "removed": items(self.removed), "kept": items(self.kept),
                "errors": self.errors, "warnings": self.warnings}


@dataclass(frozen=True)
class Policy:
    """Which sandboxes may go besides this user's orphans."""

    output_root: Path = field(default_factory=Path.cwd)  # where run locks are read (logs/<exp>.lock)
    force: bool = False  # also live sandboxes of the named experiment
    other_users: bool = False  # also other users' sandboxes (orphans; live ones with force)

    def decide(self, labels: dict[str, str], experiment: str | None) -> tuple[bool, str]:
        if experiment and _owned_by_caller(labels):  # a trainer tearing down its own run
            return True, "the caller's own run"
        state, why = verdict(labels, self.output_root, any_user=self.other_users)
        if state is Verdict.ORPHAN:
            return True, f"orphan: {why}"
        if state is Verdict.LIVE and self.force and experiment:
            return True, f"forced: {why}"
        if state is Verdict.OTHER_USER:
            return False, f"{why}; left alone (--other-users removes other users' orphans)"
        if state is Verdict.UNOWNED:
            if experiment:  # asked for by name
                return True, f"named run: {why}"
            return False, f"{why}; left alone (--experiment NAME removes it)"
        hint = "; name the run and pass --force to remove" if state is Verdict.LIVE else ""
        return False, f"{state.value}: {why}{hint}"


def _owned_by_caller(labels: dict[str, str]) -> bool:
    from rlkit.config.owner import host, uid

    return (labels.get(L.OWNER_PID) == str(os.getpid()) and labels.get(L.OWNER_HOST) == L.label_value(host())
            and labels.get(L.OWNER_UID) == str(uid()))


def _describe(labels: dict[str, str]) -> str:
    keys = (L.PROJECT, L.EXPERIMENT, L.STEP, L.SESSION)
    return " ".join(f"{k.split('.', 1)[1]}={labels[k]}" for k in keys if labels.get(k))


# ---- docker -------------------------------------------------------------------------------------
def docker_sandboxes(project: str | None = None, experiment: str | None = None) -> list[dict]:
    """Labelled containers (running or not) as Engine API summaries."""
    from rlkit.sandbox.docker_api import api_client

    wanted = [f"{k}={v}" for k, v in L.selector(project, experiment).items()]
    return api_client().containers(all=True, filters={"label": wanted})


def clean_docker(report: CleanupReport, project: str | None, experiment: str | None,
                 policy: Policy | None = None) -> None:
    import docker.errors

    from rlkit.sandbox.docker_api import api_client

    policy = policy or Policy()
    api = api_client()
    for summary in docker_sandboxes(project, experiment):
        name = (summary.get("Names") or [summary["Id"][:12]])[0].lstrip("/")
        labels = summary.get("Labels") or {}
        go, why = policy.decide(labels, experiment)
        detail = f"{_describe(labels)}; {why}"
        if not go:
            report.kept.append(Removed("container", name, detail))
            continue
        if not report.dry_run:
            try:
                api.remove_container(summary["Id"], force=True, v=True)
            except docker.errors.NotFound:
                continue  # removed concurrently (its trial finished)
            except docker.errors.APIError as exc:
                report.errors.append(f"container {name}: {exc.explanation or exc}")
                continue
        report.removed.append(Removed("container", name, detail))


def clean_agent_volumes(report: CleanupReport, project: str | None, policy: Policy | None = None) -> None:
    """Agent volumes (rlkit.sandbox.agent_volume) no agent image names any more: the agent was rebuilt or
    re-pinned (a new volume took over) or its image was removed. The current volume of each agent image
    stays; one a container still mounts stays too (docker refuses, and says so). This uid's only, unless
    other_users; with a project, only those that project's processes filled."""
    import docker.errors

    from rlkit.config.owner import uid
    from rlkit.sandbox.agent_volume import stale_agent_volumes
    from rlkit.sandbox.docker_api import api_client

    policy = policy or Policy()
    api = api_client()
    for name in stale_agent_volumes(api, None if policy.other_users else str(uid()), project):
        detail = "no agent image names it any more"
        if not report.dry_run:
            try:
                api.remove_volume(name)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                report.kept.append(Removed("volume", name, f"{detail}; in use ({exc.explanation or exc})"))
                continue
        report.removed.append(Removed("volume", name, detail))


# ---- kubernetes -----------------------------------------------------------------------------------
def k8s_configured() -> bool:
    """A cluster is configured: in-cluster service account, $KUBECONFIG, or ~/.kube/config."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG")
                or (Path.home() / ".kube" / "config").is_file())


def clean_k8s(report: CleanupReport, project: str | None, experiment: str | None,
              namespace: str | None = None, core_api: object | None = None, policy: Policy | None = None) -> None:
    """Delete this user's orphan pods in `namespace` (default $RLKIT_K8S_NAMESPACE or "rlkit")."""
    from rlkit.sandbox.k8s import delete_labelled_pods, load_core_api

    policy = policy or Policy()
    api = core_api or load_core_api()
    namespace = namespace or os.environ.get("RLKIT_K8S_NAMESPACE", "rlkit")

    def select(labels: dict[str, str]) -> bool:
        go, why = policy.decide(labels, experiment)
        if not go:
            report.kept.append(Removed("pod", f"{namespace}/{labels.get(L.SESSION, '?')}",
                                       f"{_describe(labels)}; {why}"))
        return go

    for pod_name, pod_labels in delete_labelled_pods(api, namespace, L.selector(project, experiment),
                                                     dry_run=report.dry_run, select=select):
        report.removed.append(Removed("pod", f"{namespace}/{pod_name}", _describe(pod_labels)))


# ---- processes, ports, /tmp, stale locks ----------------------------------------------------------
def clean_processes(report: CleanupReport, output_roots: list[Path], project: str | None = None,
                    experiment: str | None = None, leftovers: list[Path] | None = None) -> None:
    """Stop orphaned rlkit processes (with a project, only its runs'); the folders they wrote to go into
    `leftovers`, for the scoped /tmp pass after they are gone."""
    import psutil

    from rlkit.ops import procs
    from rlkit.ops.tmpfiles import process_leftovers

    orphans = [p for p in procs.scan(output_roots, project, experiment) if p.orphan]
    if leftovers is not None:
        for p in orphans:
            try:
                environ = psutil.Process(p.pid).environ()
            except psutil.Error:
                environ = {}
            leftovers += process_leftovers(p.cmd, environ)
    if not report.dry_run:
        orphans, errors = procs.stop(orphans)
        report.errors += errors
    report.removed += [Removed("process", str(p.pid), f"{p.kind}: {p.cmd[:90]} ({p.why})") for p in orphans]


def check_ports(report: CleanupReport, ports: Iterable[int]) -> None:
    """Name whatever still holds a run's port after cleanup; never stop it."""
    from rlkit.ops.procs import kind_of, listeners

    for port in sorted(set(ports)):
        for pid, cmd in listeners(port):
            whose = "an rlkit process that is not an orphan" if kind_of(cmd) else "not rlkit's"
            report.warnings.append(f"port {port} is held by pid {pid} ({cmd[:80] or '?'}), {whose}; left alone")


def stale_locks(output_root: Path, project: str | None = None,
                experiment: str | None = None) -> list[tuple[Path, dict]]:
    """Locks under output_root/logs whose run is dead (its trainer and reaper both gone), with a project
    only its runs'."""
    from rlkit.config.owner import lock_is_stale, read_lock

    logs = output_root / "logs"
    found = []
    for path in sorted(logs.glob("*.lock")) if logs.is_dir() else ():
        lock = read_lock(path)
        if lock is None or not lock_is_stale(lock):
            continue
        if project and (lock.get("project") != project or (experiment and lock.get("exp") != experiment)):
            continue
        found.append((path, lock))
    return found


def clean_tmp(report: CleanupReport, candidates: Iterable[Path] | None = None) -> None:
    """Leftovers on disk: with `candidates` (a scoped cleanup) only those; else every stale one of this user."""
    from rlkit.ops.tmpfiles import remove, scoped, stale_tmp

    for path, what in stale_tmp() if candidates is None else scoped(candidates):
        error = None if report.dry_run else remove(path)
        if error:
            report.errors.append(f"{path}: {error}")
        else:
            report.removed.append(Removed("tmp", str(path), what))


def clean_locks(report: CleanupReport, locks: list[tuple[Path, dict]]) -> None:
    """A dead run's lock goes once what it lists is gone (the reaper does this after a kill -9 of the
    trainer; this covers a reaper that died too)."""
    for path, lock in locks:
        if not report.dry_run:
            path.unlink(missing_ok=True)
        report.removed.append(Removed("lock", str(path), f"run {lock.get('project')}/{lock.get('exp')}, trainer "
                                                         f"pid {lock.get('pid')} gone, died at step {lock.get('step')}"))


# ---- entry point ---------------------------------------------------------------------------------
def cleanup(project: str | None = None, experiment: str | None = None, *, dry_run: bool = False,
            docker: bool = True, k8s: bool | None = None, processes: bool = False, tmp: bool = False,
            ports: Iterable[int] = (), policy: Policy | None = None, namespace: str | None = None,
            log: Callable[[str], None] | None = None) -> CleanupReport:
    """Remove this user's orphaned sandboxes (and with `processes` / `tmp`, orphaned processes / leftovers).

    With a project, every part is scoped to that project's runs: sandboxes by label, processes by the
    owner environment or a stale lock of the project, leftovers on disk only when that run's stale
    lock or orphaned processes name them. Without one it looks at everything of this user."""
    from rlkit.sandbox.dockerd import dockerd_answers

    policy = policy or Policy()
    report = CleanupReport(dry_run=dry_run)
    locks = stale_locks(policy.output_root, project, experiment) if processes and tmp else []
    leftovers: list[Path] = [Path(p) for _, lock in locks for p in lock.get("leftovers") or [] if isinstance(p, str)]
    if processes:  # servers first: a dead run's proxy must not keep a sandbox busy
        clean_processes(report, [policy.output_root], project, experiment, leftovers)
    # No daemon answering means no containers to clean; never start one just for cleanup.
    if docker and dockerd_answers():
        clean_docker(report, project, experiment, policy)
        if not experiment:  # a run's teardown leaves the agent volumes to the next run
            clean_agent_volumes(report, project, policy)
    if k8s_configured() if k8s is None else k8s:
        try:
            clean_k8s(report, project, experiment, namespace=namespace, policy=policy)
        except Exception as exc:  # noqa: BLE001 — an unreachable cluster must not stop docker cleanup
            report.warnings.append(f"kubernetes not cleaned: {str(exc)[:200]}")
    if tmp:
        clean_tmp(report, leftovers if project else None)
    clean_locks(report, locks)
    if processes and not dry_run:
        check_ports(report, ports)
    if log:
        render(report, log)
    return report


def render(report: CleanupReport, log: Callable[[str], None]) -> None:
    verb = "would remove" if report.dry_run else "removed"
    for item in report.removed:
        log(f"{verb} {item.kind} {item.name}" + (f"  ({item.detail})" if item.detail else ""))
    for item in report.kept:
        log(f"kept {item.kind} {item.name}  ({item.detail})")
    for error in report.errors:
        log(f"✗ {error}")
    for warning in report.warnings:
        log(f"⚠ {warning}")
    if report.nothing_done:
        log("nothing to clean")
