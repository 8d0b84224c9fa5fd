"""DockerEnvironment against a real dockerd: lifecycle, exec, transfer, timeouts, harbor Trial."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from rlkit.errors import SandboxError
from rlkit.sandbox.timeouts import SandboxExecTimeout
from tests.sandbox._helpers import make_env, write_task

pytestmark = pytest.mark.docker


def _inspect(docker_api, container_id: str) -> dict:
    return docker_api.inspect_container(container_id)


def _exists(docker_api, container_id: str) -> bool:
    return bool(docker_api.containers(all=True, filters={"id": container_id}))


def test_lifecycle_labels_limits_and_exec(calc_task: Path, tmp_path: Path, docker_api, project: str) -> None:
    env = make_env(calc_task, tmp_path, project=project, experiment="exp1", step=7)

    async def scenario() -> str:
        await env.start(force_build=False)
        try:
            return await checks()
        finally:
            await env.stop(delete=True)

    async def checks() -> str:
        cid = env.container_id
        assert cid
        info = _inspect(docker_api, cid)
        labels = info["Config"]["Labels"]
        assert labels["rlkit.managed"] == "1"
        assert (labels["rlkit.project"], labels["rlkit.experiment"], labels["rlkit.step"]) == (project, "exp1", "7")
        assert labels["rlkit.session"] == env.session_id
        assert labels["rlkit.task"] == calc_task.name and labels["rlkit.owner_pid"].isdigit()
        assert info["HostConfig"]["NanoCpus"] == 1_000_000_000
        assert info["HostConfig"]["Memory"] == 256 * 1024 * 1024
        assert info["HostConfig"]["NetworkMode"] == "bridge"

        result = await env.exec("pwd; echo $GREETING; id -un; ls -d /logs/agent /logs/verifier /logs/artifacts",
                                env={"GREETING": "hello"})
        assert result.return_code == 0
        assert result.stdout.split() == ["/app", "hello", "root", "/logs/agent", "/logs/artifacts",
                                         "/logs/verifier"]
        # one hostname per task, of docker's form: the agent's shell prompt is the same in every trial
        from rlkit.sandbox._identity import sandbox_hostname

        host = (await env.exec("hostname")).stdout.strip()
        assert host == sandbox_hostname(calc_task.name) and len(host) == 12 and int(host, 16) >= 0
        failing = await env.exec("echo oops >&2; exit 3", cwd="/tmp")
        assert (failing.return_code, failing.stderr, failing.stdout) == (3, "oops\n", None)
        as_nobody = await env.exec("id -un; pwd", user="nobody", cwd="/tmp")
        assert as_nobody.stdout.split() == ["nobody", "/tmp"]
        return cid

    cid = asyncio.run(scenario())
    assert not _exists(docker_api, cid)
    assert env.container_id is None


def test_upload_download_roundtrip(calc_task: Path, tmp_path: Path) -> None:
    env = make_env(calc_task, tmp_path)
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "nested" / "b.sh").write_text("#!/bin/sh\necho beta\n")
    (src / "nested" / "b.sh").chmod(0o755)
    single = tmp_path / "single.txt"
    single.write_text("one file")
    (tmp_path / "empty").mkdir()

    async def scenario() -> None:
        await env.start(force_build=False)
        try:
            await env.upload_dir(src, "/work/in")
            await env.upload_dir(src, "/logs/verifier")  # an existing 777 dir keeps its mode
            assert (await env.exec("stat -c %a /logs/verifier")).stdout.strip() == "777"
            await env.upload_dir(tmp_path / "empty", "/made/empty")
            assert await env.is_dir("/made/empty")
            # Small archives go through the exec session, big ones through put_archive.
            big = tmp_path / "big.bin"
            big.write_bytes(os.urandom(300_000))
            await env.upload_file(big, "/big/big.bin")
            await env.download_file("/big/big.bin", tmp_path / "big-copy.bin")
            assert (tmp_path / "big-copy.bin").read_bytes() == big.read_bytes()
            await env.upload_file(single, "/deep/new/dir/single.txt")
            listing = await env.exec("cat /work/in/a.txt; echo; /work/in/nested/b.sh; "
                                     "cat /deep/new/dir/single.txt; echo; stat -c %a /tmp")
            assert listing.stdout.splitlines() == ["alpha", "beta", "one file", "1777"]
            await env.exec("mkdir -p /out/sub && echo x > /out/x.txt && echo y > /out/sub/y.txt")
            await env.download_dir("/out", tmp_path / "down")
            await env.download_file("/out/sub/y.txt", tmp_path / "y-copy.txt")
            with pytest.raises(FileNotFoundError):
                await env.download_file("/nope.txt", tmp_path / "nope.txt")
            # Path checks answer like `test -d` / `test -f`, links followed.
            await env.exec("mkfifo /out/pipe && ln -s /out /out-link && ln -s /out/x.txt /x-link")
            checks = [await env.is_dir(p) for p in ("/out", "/out/x.txt", "/missing", "/out-link", "/x-link")]
            assert checks == [True, False, False, True, False]
            checks = [await env.is_file(p) for p in ("/out", "/out/x.txt", "/missing", "/out/pipe", "/x-link")]
            assert checks == [False, True, False, False, True]
            assert await env.is_dir("/root", user="nobody") is True
        finally:
            await env.stop(delete=True)

    asyncio.run(scenario())
    assert (tmp_path / "down" / "x.txt").read_text() == "x\n"
    assert (tmp_path / "down" / "sub" / "y.txt").read_text() == "y\n"
    assert (tmp_path / "y-copy.txt").read_text() == "y\n"


def test_exec_timeout_raises_and_kills_the_command(calc_task: Path, tmp_path: Path) -> None:
    env = make_env(calc_task, tmp_path)

    async def scenario() -> str:
        await env.start(force_build=False)
        try:
            with pytest.raises(SandboxExecTimeout) as caught:
                await env.exec("sleep 300 & sleep 301; echo never", timeout_sec=1)
            assert isinstance(caught.value, TimeoutError)  # harbor maps it to its phase timeout
            # A cancelled exec (harbor's agent timeout) is killed too.
            task = asyncio.create_task(env.exec("sleep 302"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return (await env.exec("ps -eo args")).stdout
        finally:
            await env.stop(delete=True)

    processes = asyncio.run(scenario())
    assert "sleep 30" not in processes, processes


def test_network_modes(calc_task: Path, tmp_path: Path, docker_api) -> None:
    task = write_task(tmp_path, "rlkit-test-offline", task_toml='[environment]\nnetwork_mode = "no-network"\n',
                      dockerfile="FROM rlkit/base:bookworm\n")

    async def mode_of(env) -> tuple[str, str]:
        await env.start(force_build=False)
        try:
            links = (await env.exec("ls /sys/class/net")).stdout.split()
            if env.network_mode() == "host":  # the host network keeps the host's name
                assert (await env.exec("hostname")).stdout.strip() == socket.gethostname()
            return _inspect(docker_api, env.container_id)["HostConfig"]["NetworkMode"], " ".join(sorted(links))
        finally:
            await env.stop(delete=True)

    offline_mode, offline_links = asyncio.run(mode_of(make_env(task, tmp_path)))
    assert (offline_mode, offline_links) == ("none", "lo")
    host_mode, _ = asyncio.run(mode_of(make_env(task, tmp_path, network="host")))
    assert host_mode == "host"


def test_missing_prebuilt_image_is_a_sandbox_error(tmp_path: Path, dockerd: str) -> None:
    task = write_task(tmp_path, "rlkit-test-prebuilt",
                      task_toml='[environment]\ndocker_image = "rlkit-test/does-not-exist:1"\n')
    env = make_env(task, tmp_path)
    with pytest.raises(SandboxError, match="not present locally"):
        asyncio.run(env.start(force_build=False))


def test_exec_before_start_is_a_sandbox_error(calc_task: Path, tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not running"):
        asyncio.run(make_env(calc_task, tmp_path).exec("true"))


def test_concurrent_sandboxes(calc_task: Path, tmp_path: Path, docker_api, project: str) -> None:
    """Eight trials' sandboxes at once on the shared thread pool, each isolated."""
    envs = [make_env(calc_task, tmp_path, project=project) for _ in range(8)]

    async def one(i: int, env) -> str:
        await env.start(force_build=False)
        try:
            await env.exec(f"echo {i} > /app/mine.txt")
            await asyncio.sleep(0.2)
            return (await env.exec("cat /app/mine.txt")).stdout.strip()
        finally:
            await env.stop(delete=True)

    async def scenario() -> list[str]:
        return await asyncio.gather(*(one(i, env) for i, env in enumerate(envs)))

    assert asyncio.run(scenario()) == [str(i) for i in range(8)]
    assert docker_api.containers(all=True, filters={"label": f"rlkit.project={project}"}) == []


def test_harbor_trial_oracle_and_nop(calc_task: Path, tmp_path: Path) -> None:
    """harbor's own Trial + verifier run unchanged on the backend (loaded by import_path)."""
    from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
    from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig
    from harbor.trial.trial import Trial

    from rlkit.sandbox import IMPORT_PATHS
    from rlkit.tasks.images import task_image_ref

    async def run(agent: str):
        config = TrialConfig(task=TaskConfig(path=calc_task), trials_dir=tmp_path / agent,
                             agent=AgentConfig(name=agent),
                             environment=TrialEnvironmentConfig(
                                 import_path=IMPORT_PATHS["docker"],
                                 kwargs={"image": task_image_ref(calc_task.name)}))  # the task names its image
        return await (await Trial.create(config)).run()

    oracle, nop = asyncio.run(run("oracle")), asyncio.run(run("nop"))
    assert oracle.exception_info is None and oracle.verifier_result.rewards == {"reward": 1.0}
    assert nop.exception_info is None and nop.verifier_result.rewards == {"reward": 0.0}
    assert list((tmp_path / "oracle").glob("*/verifier/reward.txt"))


def test_cancelled_start_leaves_no_container(calc_task: Path, tmp_path: Path, docker_api, project: str) -> None:
    """harbor's start timeout cancels start(); whatever was created is removed."""

    async def scenario() -> None:
        for delay in (0.0, 0.05, 0.15):
            env = make_env(calc_task, tmp_path, project=project)
            task = asyncio.create_task(env.start(force_build=False))
            await asyncio.sleep(delay)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            await env.stop(delete=True)  # what harbor does after a failed start

    asyncio.run(scenario())
    assert docker_api.containers(all=True, filters={"label": f"rlkit.project={project}"}) == []


def test_log_dirs_are_bind_mounted_on_a_local_daemon(calc_task: Path, tmp_path: Path) -> None:
    """The trial's /logs dirs live in the host trial dir: nothing to download after the agent."""
    mounted = make_env(calc_task, tmp_path)
    copied = make_env(calc_task, tmp_path, auto_mounting=False)

    async def write_reward(env) -> tuple[bool, str]:
        await env.start(force_build=False)
        try:
            await env.exec("echo 0.5 > /logs/verifier/reward.txt && echo hi > /logs/agent/a.txt", user="nobody")
            return (env.is_path_mounted("/logs/verifier", env.trial_paths.verifier_dir),
                    (await env.exec("stat -c %a /logs/agent")).stdout.strip())
        finally:
            await env.stop(delete=True)

    assert asyncio.run(write_reward(mounted)) == (True, "777")
    assert (mounted.trial_paths.verifier_dir / "reward.txt").read_text() == "0.5\n"
    assert (mounted.trial_paths.agent_dir / "a.txt").read_text() == "hi\n"
    assert asyncio.run(write_reward(copied)) == (False, "777")
    assert not (copied.trial_paths.verifier_dir / "reward.txt").exists()


def test_symlinks_an_agent_plants_in_mounted_logs_are_dropped_before_the_host_reads(
        calc_task: Path, tmp_path: Path) -> None:
    """A link in /logs/agent would point into the host's filesystem once host-side code opens it."""
    env = make_env(calc_task, tmp_path)
    victim = tmp_path / "host-file.txt"
    victim.write_text("host data\n")

    async def plant_links() -> None:
        await env.start(force_build=False)
        try:
            await env.exec(f"mkdir -p /logs/agent/sub && ln -s {victim} /logs/agent/trajectory.json && "
                           "ln -s /etc /logs/agent/sub/etc && echo ok > /logs/agent/kept.txt")
            await env.prepare_logs_for_host()
        finally:
            await env.stop(delete=True)

    asyncio.run(plant_links())
    agent_dir = env.trial_paths.agent_dir
    assert not (agent_dir / "trajectory.json").is_symlink()
    assert not (agent_dir / "sub" / "etc").is_symlink()
    assert (agent_dir / "kept.txt").read_text() == "ok\n"
    assert victim.read_text() == "host data\n"
