"""Docker sandbox backend: one container per trial, as a harbor `BaseEnvironment`.

harbor loads it with
`TrialEnvironmentConfig(import_path="rlkit.sandbox.docker:DockerEnvironment", kwargs={...})`
so its Trial, verifier and agents run unchanged, without `docker compose` (absent here).
Every Engine API call blocks, so each runs on the shared docker thread pool.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import os
import re
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field

from rlkit.errors import SandboxError
from rlkit.sandbox import _tar, agent_volume
from rlkit.sandbox._docker_util import (
    GO_MODE_DIR,
    GO_MODE_SYMLINK,
    GO_MODE_TYPE,
    daemon_is_local,
    docker_mount,
    is_other_user,
    stat_mode,
    text_or_none,
)
from rlkit.sandbox._exec_kill import kill_process_tree
from rlkit.sandbox._exec_session import (
    ExecSession,
    SessionBroken,
    build_script,
    keepalive_command,
    kill_tree_script,
)
from rlkit.sandbox._identity import SandboxIdentity, SandboxIdentityOptions
from rlkit.sandbox.docker_api import api_client
from rlkit.sandbox.mounts import drop_symlinks
from rlkit.sandbox.pool import run_blocking
from rlkit.sandbox.tamper.profile import ImageProfile
from rlkit.sandbox.timeouts import SandboxExecTimeout
from rlkit.sandbox.work_product import Carried, carry

DockerNetwork = Literal["none", "bridge", "host"]
# Largest tar uploaded through the exec session (its base64 must fit one argv string, 128 KiB).
SESSION_UPLOAD_MAX = 64 * 1024
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_.-]+")


class DockerOptions(SandboxIdentityOptions):
    """kwargs of `TrialEnvironmentConfig` for the docker backend."""

    build_missing: bool = Field(True, description="build the task image from environment/Dockerfile if absent")
    network: DockerNetwork | None = Field(
        None, description="docker network mode; default from the task: no-network → none, public → bridge. "
        "`host` lets an in-container agent reach a proxy on the host's loopback")
    init: bool = Field(True, description="run docker-init as PID 1 so agent subprocesses are reaped")
    extra_hosts: dict[str, str] = Field(default_factory=dict, description="extra /etc/hosts entries")
    exec_session: bool = Field(True, description="run root commands through the container's keep-alive shell "
                               "instead of a `docker exec` each (docker exec when busy or unavailable)")


class DockerEnvironment(SandboxIdentity, BaseEnvironment):
    """A long-lived `sleep infinity` container; exec/upload/download go through the Engine API."""

    options_model = DockerOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._container_id: str | None = None
        self._container_name: str | None = None
        self._image_user = ""
        self._image_id = ""
        self._agent_volume: str | None = None  # the agent's read-only volume (opts.agent_mount)
        self._linked = False  # its links are in (before start, when the image's profile was cached)
        self.image_profile: ImageProfile | None = None
        self._session: ExecSession | None = None
        task_env_config = kwargs.get("task_env_config")
        if kwargs.get("network_policy") is None and task_env_config is not None:
            # Constructed outside harbor's Trial: the task's own baseline applies.
            kwargs["network_policy"] = task_env_config.resolve_baseline()
        # A local daemon can bind the trial's log dirs: no download round trips after the agent.
        kwargs.setdefault("auto_mounting", daemon_is_local())
        super().__init__(*args, **kwargs)
        assert isinstance(self.options, DockerOptions)
        self.opts: DockerOptions = self.options

    # ---- harbor hooks -------------------------------------------------------------------
    @staticmethod
    def type() -> str:
        return "rlkit-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, mounted=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    def _validate_definition(self) -> None:
        opts = self.options
        if isinstance(opts, DockerOptions) and opts.image:
            return
        if self.task_env_config.docker_image:
            return
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir / 'Dockerfile'} not found and [environment].docker_image is not set")

    # ---- naming, labels, resources ------------------------------------------------------
    @property
    def container_id(self) -> str | None:
        return self._container_id

    def network_mode(self) -> DockerNetwork:
        if self.opts.network:
            return self.opts.network
        return "none" if self.network_policy.network_mode == NetworkMode.NO_NETWORK else "bridge"

    def host_config_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"network_mode": self.network_mode(), "init": self.opts.init}
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT)
        if cpus:
            kwargs["nano_cpus"] = int(float(cpus) * 1e9)
        memory_mb = self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
        if memory_mb:
            kwargs["mem_limit"] = f"{int(memory_mb)}m"
            kwargs["memswap_limit"] = f"{int(memory_mb)}m"  # no swap on top of the limit
        if self.opts.extra_hosts:
            kwargs["extra_hosts"] = dict(self.opts.extra_hosts)
        if self._host_mounts:
            kwargs["mounts"] = [docker_mount(m) for m in self._host_mounts]
        if self._agent_volume is not None and self.opts.agent_mount is not None:
            kwargs.setdefault("mounts", []).append(agent_volume.docker_mount(self._agent_volume, self.opts.agent_mount))
        if self.opts.exec_session:
            import docker.types

            # The keep-alive's stdout is the session protocol: nothing worth a log file.
            kwargs["log_config"] = docker.types.LogConfig(type=docker.types.LogConfig.types.NONE)
        return kwargs

    def _new_container_name(self) -> str:
        stem = _BAD_NAME.sub("-", self.session_id).strip("-._")[:80] or "trial"
        return f"rlkit-{stem}-{uuid.uuid4().hex[:6]}"

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        image = self.image_ref()
        await self._ensure_image(image, force_build)
        await self._create_and_start(image)
        await self._upload_environment_dir_after_start()
        await self._profile_image()
        await self._link_agent()

    async def clean_copy(self) -> DockerEnvironment:
        """A new container from the exact image this one runs (its id), with this one's settings and
        labels but none of its state, none of its mounts but the verifier's log dir, and this one's
        image profile (the same image). The caller stops it (`stop(delete=True)`)."""
        clone = copy.copy(self)
        clone._container_id, clone._session = None, None
        # the task's own network, not the agent's way to its model (host networking to a loopback proxy)
        baseline = self.task_env_config.resolve_baseline().network_mode
        network = "none" if baseline == NetworkMode.NO_NETWORK else self.network_mode()
        # no agent: the grading container mounts and links nothing of it
        clone.opts = self.opts.model_copy(update={"network": "bridge" if network == "host" else network,
                                                  "agent_mount": None})
        clone._agent_volume, clone._linked = None, False
        verifier_dir = str(EnvironmentPaths.for_os(self.os).verifier_dir)
        clone._host_mounts = [m for m in self._host_mounts if str(m["target"]) == verifier_dir]
        await clone._create_and_start(self._image_id or self.image_ref(), suffix="-grade")
        return clone

    async def _create_and_start(self, image: str, suffix: str = "") -> None:
        api = api_client()
        if self.opts.agent_mount is not None:
            self._agent_volume = await run_blocking(agent_volume.ensure_agent_volume, api, self.opts.agent_mount)
        self._container_name = self._new_container_name() + suffix
        host_config_kwargs = self.host_config_kwargs()
        host_config = api.create_host_config(**host_config_kwargs)
        env = self._startup_env()
        session = self.opts.exec_session
        creating = asyncio.ensure_future(run_blocking(
            api.create_container, image, command=keepalive_command() if session else ["sleep", "infinity"],
            name=self._container_name, labels=self.labels(), environment=env or None,
            hostname=None if host_config_kwargs.get("network_mode") == "host" else self.hostname(),
            working_dir=self.task_env_config.workdir, host_config=host_config, detach=True, stdin_open=session))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled mid-create (harbor's start timeout): let the create finish, then remove it.
            await asyncio.shield(self._discard(creating))
            raise
        except Exception as exc:
            raise SandboxError(f"cannot create a container from {image}: {exc}", image=image) from exc
        self._container_id = created["Id"]
        try:
            # The trial's log dirs go in before start (no exec round trip, no race with the first exec).
            log_dirs = self._log_dirs_tar()
            # With the image's profile known already (no probe will run), the agent's links go in now too, beside
            # the session's attach: no round trip after start.
            links = self._early_links()
            putting = [run_blocking(api.put_archive, self._container_id, "/", tar) for tar in (log_dirs, links) if tar]
            if session:  # attach before start so the shell's hello line is not missed
                *put, attached = await asyncio.gather(*putting, run_blocking(
                    api.attach_socket, self._container_id, params={"stdin": 1, "stdout": 1, "stream": 1}))
                self._session = ExecSession(attached)
            else:
                put = await asyncio.gather(*putting)
            if links is not None and not put[-1]:
                raise SandboxError("the mounted agent's links were refused", session=self.session_id)
            self._linked = links is not None
            await run_blocking(api.start, self._container_id)
        except asyncio.CancelledError:
            await asyncio.shield(self._remove_quietly())
            raise
        except Exception as exc:
            await self._remove_quietly()
            raise SandboxError(f"cannot start container {self._container_name}: {exc}", image=image) from exc

    def _early_links(self) -> bytes | None:
        """The agent's links as a tar, when they may go in before start: the image's profile is cached, so
        nothing probes the sandbox with the links in it."""
        from rlkit.sandbox.tamper.profile import cached

        if self.opts.agent_mount is None or cached(self._image_id) is None:
            return None
        return agent_volume.links_tar(self.opts.agent_mount)

    async def _link_agent(self) -> None:
        """The mounted agent's links (on PATH), made after the image was profiled: the verifier's profile
        is the task image's alone. A tar through the Engine API: nothing runs in the sandbox for it."""
        links = None if self.opts.agent_mount is None or self._linked else agent_volume.links_tar(self.opts.agent_mount)
        if links is not None and not await run_blocking(api_client().put_archive, self._require_container(), "/",
                                                        links):
            raise SandboxError(f"cannot link the mounted agent in {self._container_name}", session=self.session_id)

    async def _profile_image(self) -> None:
        """What the verifier needs to know of the image, probed here (before any agent) once per image."""
        from rlkit.sandbox.tamper import ensure_profile

        self.image_profile = await ensure_profile(self, self._image_id or self.image_ref())
        if self.image_profile is None:
            raise SandboxError(f"cannot probe image {self.image_ref()} for the verifier (see the log)",
                               image=self.image_ref(), fix="the image needs sh; run `rlkit trial` on the task")

    def _shell(self) -> str:
        """The image's own bash by absolute path, once the image is profiled (`bash` before that)."""
        return self.image_profile.tool("bash") if self.image_profile is not None else "bash"

    def _log_dirs_tar(self) -> bytes | None:
        """A tar of the trial's log dirs (mode 777) not already bind-mounted; None if all are."""
        paths = EnvironmentPaths.for_os(self.os)
        defaults = {str(paths.agent_dir), str(paths.verifier_dir), str(paths.artifacts_dir)}
        mounted = {str(m["target"]) for m in self._host_mounts}
        targets = sorted(({str(t) for t in self._mount_targets(writable_only=True)} | defaults) - mounted)
        if not targets:
            return None
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            now = time.time()
            for target in targets:
                parts = Path(target.lstrip("/")).parts
                for depth in range(1, len(parts) + 1):
                    info = tarfile.TarInfo("/".join(parts[:depth]))
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o777
                    info.mtime = now
                    tar.addfile(info)
        return buf.getvalue()

    async def prepare_logs_for_host(self) -> None:
        """Make bind-mounted log dirs safe and readable for the host, before harbor reads them.

        Symlinks the agent left there are removed: host-side code (harbor's log parsing,
        trajectory writers) would otherwise follow them to host files. Then the files are
        given to the host user when that is not root."""
        for mount in self._host_mounts:
            if mount.get("type") == "bind" and not mount.get("read_only"):
                drop_symlinks(Path(str(mount["source"])))
        if not self._host_mounts or os.getuid() == 0 or self._container_id is None:
            return
        targets = " ".join(shlex.quote(str(m["target"])) for m in self._host_mounts if not m.get("read_only"))
        if targets:
            await self.exec(f"chown -R {os.getuid()}:{os.getgid()} {targets}", user="root", timeout_sec=120)

    async def _ensure_image(self, image: str, force_build: bool) -> None:
        from rlkit.sandbox.images import ensure_task_image

        # The caller names every image; it is built here only from the task's own Dockerfile.
        prebuilt = bool(self.task_env_config.docker_image) or not (self.environment_dir / "Dockerfile").is_file()
        info = await run_blocking(
            ensure_task_image, api_client(), image, None if prebuilt else self.environment_dir,
            self.environment_name, force=force_build, build_missing=self.opts.build_missing,
            baked=self.opts.image_variant != "latest", log=self.logger.info)
        self._image_user = str((info.get("Config") or {}).get("User") or "")
        self._image_id = str(info.get("Id") or "")

    async def stop(self, delete: bool) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._container_id is None:
            return
        if delete:
            await self._remove_quietly()
            return
        try:
            await run_blocking(api_client().stop, self._container_id, timeout=2)
        except Exception as exc:  # noqa: BLE001 — best effort; the reaper finds it by label
            self.logger.warning(f"stopping {self._container_name} failed: {exc}")

    async def _discard(self, creating: asyncio.Future) -> None:
        try:
            self._container_id = (await creating)["Id"]
        except Exception:  # noqa: BLE001 — the create failed: nothing to remove
            return
        await self._remove_quietly()

    async def _remove_quietly(self) -> None:
        import docker.errors

        container, self._container_id = self._container_id, None
        if container is None:
            return
        try:
            await run_blocking(api_client().remove_container, container, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 — best effort; the reaper finds it by label
            self.logger.warning(f"removing {self._container_name} failed: {exc}")

    # ---- exec -------------------------------------------------------------------------------
    def _require_container(self) -> str:
        if self._container_id is None:
            raise SandboxError("the sandbox is not running (call start first)", session=self.session_id)
        return self._container_id

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None, *,
                   shell: str | None = None) -> ExecResult:
        """`command` in bash (`shell`: a bash by absolute path; default the image's own, once profiled)."""
        container = self._require_container()
        user = self._resolve_user(user)
        cwd = cwd or self.task_env_config.workdir
        merged_env = self._merge_env(env)
        session = self._session_for(user)
        if session is not None and session.try_acquire():
            try:
                return await self._exec_in_session(session, command, cwd, merged_env, timeout_sec,
                                                   shell or self._shell())
            except SessionBroken as exc:  # raised before the command started: docker exec runs it
                self.logger.debug(f"exec session of {self._container_name} unusable ({exc}); using docker exec")
        api = api_client()
        try:
            exec_id = (await run_blocking(
                api.exec_create, container, [shell or self._shell(), "-c", command], stdout=True, stderr=True,
                workdir=cwd, environment=merged_env, user="" if user is None else str(user)))["Id"]
        except Exception as exc:
            raise SandboxError(f"exec in {self._container_name} failed: {exc}", session=self.session_id) from exc
        run = run_blocking(api_client(long_running=True).exec_start, exec_id, demux=True)
        try:
            if timeout_sec:
                stdout, stderr = await asyncio.wait_for(run, timeout=timeout_sec)
            else:
                stdout, stderr = await run
        except TimeoutError:
            await self._kill_exec(exec_id)
            raise SandboxExecTimeout(f"command timed out after {timeout_sec} seconds",
                                     session=self.session_id, timeout_sec=timeout_sec) from None
        except asyncio.CancelledError:
            # harbor cancels the agent's task at its timeout: don't leave the command running.
            await asyncio.shield(self._kill_exec(exec_id))
            raise
        info = await run_blocking(api.exec_inspect, exec_id)
        return ExecResult(stdout=text_or_none(stdout), stderr=text_or_none(stderr), return_code=int(info.get("ExitCode") or 0))

    def _session_for(self, user: str | int | None) -> ExecSession | None:
        """The container's root shell, when this command would run as root anyway."""
        if not self.opts.exec_session or self._container_id is None:
            return None
        effective = self._image_user if user is None else str(user)
        if effective not in {"", "root", "0"} or self._session is None or self._session.broken:
            return None
        return self._session

    async def _exec_in_session(self, session: ExecSession, command: str, cwd: str | None,
                               env: dict[str, str] | None, timeout_sec: float | None, shell: str) -> ExecResult:
        deadline = time.monotonic() + timeout_sec if timeout_sec else None
        started: dict[str, int] = {}
        try:
            # The worker thread releases the session when it is done with it.
            result = await run_blocking(session.run_and_release, build_script(command, cwd, env, shell), deadline,
                                        lambda pid: started.__setitem__("pid", pid))
        except asyncio.CancelledError:
            session.cancel()  # the thread stops waiting; the command's answer is drained later
            if "pid" in started:
                await asyncio.shield(self._kill_in_container(started["pid"]))
            raise
        if result.return_code is None:
            await self._kill_in_container(result.pid)
            raise SandboxExecTimeout(f"command timed out after {timeout_sec} seconds",
                                     session=self.session_id, timeout_sec=timeout_sec)
        return ExecResult(stdout=text_or_none(result.stdout or None), stderr=text_or_none(result.stderr or None),
                          return_code=result.return_code)

    async def _kill_in_container(self, pid: int | None) -> None:
        """Kill a session command's process tree (pid as the container sees it)."""
        if pid is None or self._container_id is None:
            return
        api = api_client()
        try:
            exec_id = (await run_blocking(api.exec_create, self._container_id,
                                          [self._shell(), "-c", kill_tree_script(pid)], user="root"))["Id"]
            await run_blocking(api.exec_start, exec_id)
        except Exception as exc:  # noqa: BLE001 — the container may already be gone
            self.logger.debug(f"killing pid {pid} in {self._container_name} failed: {exc}")

    async def _kill_exec(self, exec_id: str) -> None:
        try:
            info = await run_blocking(api_client().exec_inspect, exec_id)
            if info.get("Running") and info.get("Pid"):
                await run_blocking(kill_process_tree, int(info["Pid"]))
        except Exception as exc:  # noqa: BLE001 — the container may already be gone
            self.logger.debug(f"killing exec {exec_id[:12]} failed: {exc}")

    # ---- path checks without an exec (HEAD on the archive endpoint) ----------------------------
    async def _stat_mode(self, path: str) -> int | None:
        """Go FileMode bits of `path`, or None when it does not exist."""
        return await run_blocking(stat_mode, api_client(), self._require_container(), path)

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        as_other = is_other_user(self._resolve_user(user))
        mode = None if as_other else await self._stat_mode(path)
        if as_other or (mode is not None and mode & GO_MODE_SYMLINK):
            return await super().is_dir(path, user=user)  # permissions / link targets: ask `test -d`
        return mode is not None and bool(mode & GO_MODE_DIR)

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        as_other = is_other_user(self._resolve_user(user))
        mode = None if as_other else await self._stat_mode(path)
        if as_other or (mode is not None and mode & GO_MODE_SYMLINK):
            return await super().is_file(path, user=user)
        return mode is not None and not mode & GO_MODE_TYPE

    # ---- file transfer --------------------------------------------------------------------------
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        data = await run_blocking(_tar.pack_file, Path(source_path), target_path)
        await self._put(data)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        data = await run_blocking(_tar.pack_dir, Path(source_dir), target_dir)
        await self._put(data)

    async def _put(self, data: bytes) -> None:
        container = self._require_container()
        if len(data) <= SESSION_UPLOAD_MAX and self._session_for("root") is not None:
            # Small archives (a task's tests/) go through the session: no chrooted tar process
            # in dockerd. Bigger ones would hit the argv limit of the session's script.
            encoded = base64.b64encode(data).decode()
            tool = self.image_profile.tool if self.image_profile is not None else str
            result = await self.exec(f"printf %s '{encoded}' | {tool('base64')} -d | {tool('tar')} -xf - -C /",
                                     user="root")
            if result.return_code == 0:
                return
            self.logger.debug(f"session upload failed ({result.stderr}); using put_archive")
        ok = await run_blocking(api_client().put_archive, container, "/", data)
        if not ok:
            raise SandboxError(f"upload into {self._container_name} failed", session=self.session_id)

    async def _get(self, path: str) -> bytes:
        import docker.errors

        container = self._require_container()

        def fetch() -> bytes:
            stream, _stat = api_client().get_archive(container, path)
            return b"".join(stream)

        try:
            return await run_blocking(fetch)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"{path} not found in {self._container_name}") from exc

    async def carry_out(self, path: str, max_bytes: int) -> Carried:
        """`path` of this container as a work product (`work_product.carry`), read through dockerd's
        archive endpoint (nothing runs in the container); `missing` when it does not exist."""
        import docker.errors

        container = self._require_container()

        def fetch() -> Carried:
            try:
                stream, _stat = api_client().get_archive(container, path)
            except docker.errors.NotFound:
                return Carried(path, missing=True)
            return carry(stream, path, max_bytes)

        return await run_blocking(fetch)

    async def put_archive(self, data: bytes) -> None:
        """Extract tar `data` at / through dockerd (no tool of the container runs)."""
        if not await run_blocking(api_client().put_archive, self._require_container(), "/", data):
            raise SandboxError(f"upload into {self._container_name} failed", session=self.session_id)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await self._get(source_path)
        await run_blocking(_tar.extract_single_file, data, Path(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        data = await self._get(source_dir.rstrip("/") or "/")
        await run_blocking(_tar.extract_dir, data, Path(target_dir), True)
