"""Kubernetes sandbox backend: one pod per trial, as a harbor `BaseEnvironment`.

harbor loads it with
`TrialEnvironmentConfig(import_path="rlkit.sandbox.k8s:KubernetesEnvironment", kwargs={...})`.
Exec goes through the API server's exec websocket (`kubernetes.stream.stream`); files move
as base64 tar over exec. The pod manifest is built by the pure `k8s_spec` module; API
calls block, so they run on the shared sandbox thread pool.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field

from rlkit.errors import SandboxError, UserError
from rlkit.sandbox import _tar, agent_volume, is_loopback
from rlkit.sandbox import k8s_spec as spec
from rlkit.sandbox._identity import SandboxIdentity, SandboxIdentityOptions
from rlkit.sandbox.pool import run_blocking
from rlkit.sandbox.tamper.profile import ImageProfile
from rlkit.sandbox.timeouts import SandboxExecTimeout

# Waiting reasons that never resolve by themselves: fail the start at once.
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError", "ErrImageNeverPull", "CrashLoopBackOff"}


class K8sOptions(SandboxIdentityOptions):
    """kwargs of `TrialEnvironmentConfig` for the kubernetes backend."""

    namespace: str = Field("rlkit", description="namespace the trial pods run in")
    pull_policy: spec.PullPolicy = Field("IfNotPresent", description="imagePullPolicy of the main container")
    image_pull_secrets: list[str] = Field(default_factory=list)
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict] = Field(default_factory=list)
    active_deadline_sec: int | None = Field(6 * 3600, description="pod self-destructs after this long")
    start_timeout_sec: float = Field(600, description="how long to wait for the pod to run")
    poll_interval_sec: float = Field(0.5, description="pod status poll interval while starting")
    kube_context: str | None = Field(None, description="kubeconfig context (default: current)")


class PodExec(Protocol):
    """Runs argv in a pod's main container. Real: the exec websocket. Tests: a fake."""

    def __call__(self, pod: str, namespace: str, argv: list[str], stdin: bytes | None,
                 timeout_sec: float | None) -> tuple[str, str, int | None]:
        """Returns (stdout, stderr, exit code); exit code None means it timed out."""
        ...


def load_core_api(context: str | None = None) -> Any:
    """CoreV1Api from the in-cluster service account or the kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config(context=context)
        except (config.ConfigException, FileNotFoundError) as exc:
            raise UserError(f"no kubernetes cluster is configured: {exc}", key="BACKEND",
                            fix="set KUBECONFIG (or run inside the cluster), or use BACKEND=docker") from exc
    return client.CoreV1Api()


def stream_exec(core_api: Any) -> PodExec:
    """The real exec: `kubernetes.stream.stream` over the API server's websocket."""
    from kubernetes.stream import stream

    def run(pod: str, namespace: str, argv: list[str], stdin: bytes | None,
            timeout_sec: float | None) -> tuple[str, str, int | None]:
        ws = stream(core_api.connect_get_namespaced_pod_exec, pod, namespace, container=spec.MAIN_CONTAINER,
                    command=argv, stderr=True, stdin=stdin is not None, stdout=True, tty=False,
                    _preload_content=False)
        return drain_ws(ws, stdin, timeout_sec)

    return run


def drain_ws(ws: Any, stdin: bytes | None, timeout_sec: float | None) -> tuple[str, str, int | None]:
    """Feed stdin, collect stdout/stderr until the command exits or the deadline passes."""
    deadline = None if not timeout_sec else time.monotonic() + timeout_sec
    out: list[str] = []
    err: list[str] = []
    try:
        if stdin is not None:
            ws.write_stdin(stdin.decode("ascii"))
        while ws.is_open():
            if deadline is not None and time.monotonic() > deadline:
                return "".join(out), "".join(err), None
            ws.update(timeout=1)
            if ws.peek_stdout():
                out.append(ws.read_stdout())
            if ws.peek_stderr():
                err.append(ws.read_stderr())
        # Frames that arrived with the close.
        out.append(ws.read_stdout() if ws.peek_stdout() else "")
        err.append(ws.read_stderr() if ws.peek_stderr() else "")
        code = ws.returncode
        return "".join(out), "".join(err), 0 if code is None else int(code)
    finally:
        ws.close()


def delete_labelled_pods(core_api: Any, namespace: str, labels: dict[str, str], dry_run: bool = False,
                         select: Callable[[dict[str, str]], bool] | None = None,
                         ) -> Iterator[tuple[str, dict[str, str]]]:
    """Delete (or with dry_run just list) pods matching `labels` (and `select`, given a pod's labels);
    yields (name, labels) of those deleted."""
    pods = core_api.list_namespaced_pod(namespace, label_selector=spec.label_selector(labels))
    for pod in pods.items:
        name = pod.metadata.name
        if select is not None and not select(dict(pod.metadata.labels or {})):
            continue
        if not dry_run:
            try:
                core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    raise
                continue
        yield name, dict(pod.metadata.labels or {})


class KubernetesEnvironment(SandboxIdentity, BaseEnvironment):
    """One pod per trial, exec through the stream API, tar-over-exec transfers."""

    options_model = K8sOptions
    # Hook for clusters reached some other way (and for tests): options -> (core, networking, exec).
    client_factory: ClassVar[Callable[[K8sOptions], tuple[Any, Any, PodExec]] | None] = None

    def __init__(self, *args: Any, core_api: Any = None, networking_api: Any = None,
                 pod_exec: PodExec | None = None, **kwargs: Any) -> None:
        self._core_api = core_api
        self._networking_api = networking_api
        self._pod_exec = pod_exec
        self._pod: str | None = None
        self._image_id = ""
        self._agent_delivery = ""  # image-volume | init-container, once chosen for opts.agent_mount
        self.image_profile: ImageProfile | None = None
        task_env_config = kwargs.get("task_env_config")
        if kwargs.get("network_policy") is None and task_env_config is not None:
            kwargs["network_policy"] = task_env_config.resolve_baseline()
        super().__init__(*args, **kwargs)
        assert isinstance(self.options, K8sOptions)
        self.opts: K8sOptions = self.options
        factory = type(self).client_factory
        if factory is not None and self._core_api is None:
            self._core_api, self._networking_api, self._pod_exec = factory(self.opts)

    @staticmethod
    def type() -> str:
        return "rlkit-k8s"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Allowlists are NetworkPolicy ipBlocks: addresses and CIDRs, never names.
        return EnvironmentCapabilities(
            disable_internet=True, gpus=True, network_allowlist=True, network_allowlist_ipv4_addresses=True,
            network_allowlist_ipv6_addresses=True, network_allowlist_ipv4_cidrs=True,
            network_allowlist_ipv6_cidrs=True)

    def validate_network_policy_support(self, network_policy: Any = None) -> None:
        super().validate_network_policy_support(network_policy)
        policy = network_policy or self.network_policy
        if policy.network_mode != NetworkMode.ALLOWLIST:
            return
        loopback = [host for host in policy.allowed_hosts if is_loopback(host)]
        if loopback:
            # harbor allowlists an in-pod agent's inference host: on k8s that must be an address pods reach.
            raise ValueError(
                f"{self.type()} cannot allow {loopback}: loopback inside a pod is the pod itself. Serve the "
                "proxy (or model endpoint) on an address pods can reach, e.g. the node's IP, and point the "
                "agent there.")

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, cpu_request=True, memory_limit=True,
                                               memory_request=True, fractional_cpus=True)

    def _validate_definition(self) -> None:
        if (isinstance(self.options, K8sOptions) and self.options.image) or self.task_env_config.docker_image:
            return
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir / 'Dockerfile'} not found and [environment].docker_image is not set")

    # ---- clients -------------------------------------------------------------------------------
    @property
    def core_api(self) -> Any:
        if self._core_api is None:
            self._core_api = load_core_api(self.opts.kube_context)
        return self._core_api

    @property
    def networking_api(self) -> Any:
        if self._networking_api is None:
            from kubernetes import client

            self._networking_api = client.NetworkingV1Api(self.core_api.api_client)
        return self._networking_api

    @property
    def pod_exec(self) -> PodExec:
        if self._pod_exec is None:
            self._pod_exec = stream_exec(self.core_api)
        return self._pod_exec

    @property
    def pod_name(self) -> str | None:
        return self._pod

    @property
    def container_id(self) -> str | None:
        """The pod's name: the same "is a sandbox up" handle the docker backend has."""
        return self._pod

    # ---- pod spec ------------------------------------------------------------------------------
    def resources(self) -> spec.PodResources:
        guarantee = ResourceMode.GUARANTEE  # AUTO on k8s: request == limit (Guaranteed QoS)
        return spec.PodResources(
            cpu_request=self._resource_request_value("cpu", auto_mode=guarantee),
            cpu_limit=self._resource_limit_value("cpu", auto_mode=guarantee),
            memory_request_mb=self._resource_request_value("memory", auto_mode=guarantee),
            memory_limit_mb=self._resource_limit_value("memory", auto_mode=guarantee),
            storage_mb=self._effective_storage_mb, gpus=self._effective_gpus)

    def pod_manifest(self, name: str) -> dict:
        return spec.build_pod_manifest(spec.PodSpecInput(
            name=name, namespace=self.opts.namespace, image=self.image_ref(), labels=self.labels(),
            resources=self.resources(), env=self._startup_env(), workdir=self.task_env_config.workdir,
            hostname=self.hostname(),
            pull_policy=self.opts.pull_policy,
            no_network=self.network_policy.network_mode == NetworkMode.NO_NETWORK,
            allowed_hosts=(tuple(self.network_policy.allowed_hosts)
                           if self.network_policy.network_mode == NetworkMode.ALLOWLIST else ()),
            service_account=self.opts.service_account, image_pull_secrets=tuple(self.opts.image_pull_secrets),
            node_selector=self.opts.node_selector, tolerations=tuple(self.opts.tolerations),
            active_deadline_sec=self.opts.active_deadline_sec, agent=self._agent_parts()))

    def _agent_parts(self) -> dict:
        mount = self.opts.agent_mount
        if mount is None:
            return {}
        delivery = mount.k8s if mount.k8s != "auto" else self._agent_delivery or "init-container"
        return agent_volume.pod_agent_parts(mount, delivery, self.opts.pull_policy)

    def agent_delivery(self) -> str:
        """How this backend gets the mounted agent into pods (the API server is asked once a process)."""
        mount = self.opts.agent_mount
        if mount is None:
            return ""
        if mount.k8s != "auto":
            return mount.k8s
        choice, _why = agent_volume.k8s_agent_delivery(self.core_api, self.opts.namespace, mount.image)
        return choice

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        core_api = self.core_api  # a missing cluster config is the user's to fix, not a retryable error
        name = spec.pod_name(self.session_id, uuid.uuid4().hex[:6])
        if self.opts.agent_mount is not None and not self._agent_delivery:
            self._agent_delivery = await run_blocking(self.agent_delivery)
        manifest = self.pod_manifest(name)
        network = manifest["metadata"]["labels"].get(spec.NETWORK_LABEL)
        if network == "none":
            await run_blocking(self._ensure_policy, spec.no_network_policy_manifest(self.opts.namespace))
        elif network is not None:
            await run_blocking(self._ensure_policy, spec.allowlist_policy_manifest(
                self.opts.namespace, self.network_policy.allowed_hosts))
        try:
            await run_blocking(core_api.create_namespaced_pod, self.opts.namespace, manifest)
        except Exception as exc:
            raise SandboxError(f"cannot create pod {name}: {exc}", pod=name, namespace=self.opts.namespace) from exc
        self._pod = name
        try:
            await self._wait_running(name)
            paths = EnvironmentPaths.for_os(self.os)
            dirs = sorted({str(paths.agent_dir), str(paths.verifier_dir), str(paths.artifacts_dir),
                           *map(str, self._mount_targets(writable_only=True))})
            await self.ensure_dirs(dirs)
        except BaseException:
            await self.stop(delete=True)
            raise
        await self._upload_environment_dir_after_start()
        await self._profile_image()
        await self._link_agent()

    async def _link_agent(self) -> None:
        """The mounted agent's links, made after the image was profiled (the profile is the image's alone)."""
        if self.opts.agent_mount is None or not self.opts.agent_mount.links:
            return
        script = agent_volume.links_script(self.opts.agent_mount, ln=self._tool("ln"), mkdir=self._tool("mkdir"))
        result = await self.exec(script, user="root", timeout_sec=60)
        if result.return_code != 0:
            raise SandboxError(f"cannot link the mounted agent in pod {self._pod}: {result.stderr}", pod=self._pod)

    async def _profile_image(self) -> None:
        """What the verifier needs to know of the image, probed here (before any agent) once per image.
        No profile (a probe that failed) leaves the trials of this image without a tamper check."""
        from rlkit.sandbox.tamper import ensure_profile

        self.image_profile = await ensure_profile(self, self._image_id or self.image_ref())

    def _tool(self, name: str) -> str:
        return self.image_profile.tool(name) if self.image_profile is not None else name

    def _ensure_policy(self, manifest: dict) -> None:
        """Create a shared NetworkPolicy (one per policy, not per pod) unless it exists."""
        try:
            self.networking_api.create_namespaced_network_policy(self.opts.namespace, manifest)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:  # 409: already there
                raise SandboxError(f"cannot create network policy {manifest['metadata']['name']}: {exc}") from exc

    async def _wait_running(self, name: str) -> None:
        deadline = time.monotonic() + self.opts.start_timeout_sec
        while True:
            pod = await run_blocking(self.core_api.read_namespaced_pod, name, self.opts.namespace)
            state = pod_state(pod)
            if state == "running":
                statuses = getattr(getattr(pod, "status", None), "container_statuses", None) or []
                self._image_id = str(getattr(statuses[0], "image_id", "") or "") if statuses else ""
                return
            if state.startswith("failed"):
                raise SandboxError(f"pod {name} cannot run: {state.removeprefix('failed: ')}", pod=name)
            if time.monotonic() > deadline:
                raise SandboxError(f"pod {name} not running after {self.opts.start_timeout_sec:.0f}s ({state})",
                                   pod=name)
            await asyncio.sleep(self.opts.poll_interval_sec)

    async def stop(self, delete: bool) -> None:
        # A pod cannot be paused: stop always deletes it (harbor's delete=False keeps
        # nothing useful here, and a kept pod would hold cluster resources).
        name, self._pod = self._pod, None
        if name is None:
            return
        try:
            await run_blocking(self.core_api.delete_namespaced_pod, name, self.opts.namespace,
                               grace_period_seconds=0)
        except Exception as exc:  # noqa: BLE001 — 404 or unreachable: the reaper finds it by label
            if getattr(exc, "status", None) != 404:
                self.logger.warning(f"deleting pod {name} failed: {exc}")

    # ---- exec ------------------------------------------------------------------------------------
    def _require_pod(self) -> str:
        if self._pod is None:
            raise SandboxError("the sandbox is not running (call start first)", session=self.session_id)
        return self._pod

    async def _run(self, argv: list[str], stdin: bytes | None = None,
                   timeout_sec: float | None = None) -> tuple[str, str, int | None]:
        pod = self._require_pod()
        try:
            return await run_blocking(self.pod_exec, pod, self.opts.namespace, argv, stdin, timeout_sec)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"exec in pod {pod} failed: {exc}", pod=pod) from exc

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None, *,
                   shell: str | None = None) -> ExecResult:
        """`command` in bash (`shell`: a bash by absolute path; default the image's own, once profiled)."""
        pid_file = f"/tmp/.rlkit-exec-{uuid.uuid4().hex[:12]}.pid"
        tool = (lambda name: shell if name == "bash" else self._tool(name)) if shell else self._tool
        argv = spec.wrap_exec(command, cwd=cwd or self.task_env_config.workdir, env=self._merge_env(env),
                              user=self._resolve_user(user), pid_file=pid_file, tool=tool)
        try:
            stdout, stderr, code = await self._run(argv, timeout_sec=timeout_sec)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(pid_file))
            raise
        if code is None:
            await self._kill(pid_file)
            raise SandboxExecTimeout(f"command timed out after {timeout_sec} seconds", session=self.session_id,
                                     timeout_sec=timeout_sec)
        return ExecResult(stdout=stdout or None, stderr=stderr or None, return_code=code)

    async def _kill(self, pid_file: str) -> None:
        try:
            await self._run(spec.kill_tree_command(pid_file, self._tool), timeout_sec=30)
        except Exception as exc:  # noqa: BLE001 — the pod may be gone already
            self.logger.debug(f"killing timed-out command failed: {exc}")

    # ---- file transfer -----------------------------------------------------------------------------
    async def _put_tar(self, data: bytes) -> None:
        encoded = base64.b64encode(data)
        _out, err, code = await self._run(spec.upload_command(len(encoded), self._tool), stdin=encoded)
        if code != 0:
            raise SandboxError(f"upload into pod {self._pod} failed: {err.strip()}", pod=self._pod)

    async def _get_tar(self, path: str) -> bytes:
        out, err, code = await self._run(spec.download_command(path, self._tool))
        if code != 0:
            if "No such file" in err or "Cannot stat" in err:
                raise FileNotFoundError(f"{path} not found in pod {self._pod}")
            raise SandboxError(f"download from pod {self._pod} failed: {err.strip()}", pod=self._pod)
        return base64.b64decode(out)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._put_tar(await run_blocking(_tar.pack_file, Path(source_path), target_path))

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._put_tar(await run_blocking(_tar.pack_dir, Path(source_dir), target_dir))

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await self._get_tar(source_path)
        await run_blocking(_tar.extract_single_file, data, Path(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        data = await self._get_tar(source_dir)
        await run_blocking(_tar.extract_dir, data, Path(target_dir), True)


def pod_state(pod: Any) -> str:
    """'running', 'pending: <why>', or 'failed: <why>' from a V1Pod (or a look-alike)."""
    status = getattr(pod, "status", None)
    phase = getattr(status, "phase", None) or "Pending"
    for cs in getattr(status, "container_statuses", None) or []:
        waiting = getattr(getattr(cs, "state", None), "waiting", None)
        reason = getattr(waiting, "reason", None)
        if reason in FATAL_WAITING:
            message = getattr(waiting, "message", "") or ""
            return f"failed: {reason} {message}".strip()
    if phase in {"Failed", "Succeeded"}:
        return f"failed: pod phase {phase} ({getattr(status, 'reason', None) or 'exited'})"
    if phase == "Running":
        statuses = getattr(status, "container_statuses", None) or []
        if statuses and all(getattr(cs, "ready", False) for cs in statuses):
            return "running"
        return "pending: container not ready"
    return f"pending: {phase}"
