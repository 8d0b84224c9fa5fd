"""KubernetesEnvironment lifecycle against a fake API (no cluster can run here).

Pure fakes cover pod creation, waiting, failures, labels, network policy and cleanup;
the docker-backed fake cluster runs exec, tar-over-exec and a full harbor Trial for real.
"""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
import uuid
from pathlib import Path

import pytest

from rlkit.errors import SandboxError
from rlkit.sandbox.k8s import KubernetesEnvironment, delete_labelled_pods
from rlkit.sandbox.timeouts import SandboxExecTimeout
from rlkit.tasks.images import task_image_ref
from tests.sandbox._helpers import write_task
from tests.sandbox.fake_k8s import (
    FakeCoreV1Api,
    FakeNetworkingV1Api,
    RecordingPodExec,
    docker_backed_cluster,
)

pytestmark = pytest.mark.fake_k8s


def make_k8s_env(task: Path, tmp: Path, core=None, net=None, pod_exec=None, **options) -> KubernetesEnvironment:
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    harbor_task = Task(task)
    paths = TrialPaths(tmp / f"trial-{uuid.uuid4().hex[:6]}")
    paths.mkdir()
    options.setdefault("poll_interval_sec", 0.01)
    if not harbor_task.config.environment.docker_image:
        options.setdefault("image", task_image_ref(harbor_task.name, options.get("registry")))
    return KubernetesEnvironment(
        environment_dir=harbor_task.paths.environment_dir, environment_name=task.name,
        session_id=f"{task.name}__{uuid.uuid4().hex[:7]}__env", trial_paths=paths,
        task_env_config=harbor_task.config.environment, core_api=core or FakeCoreV1Api(),
        networking_api=net or FakeNetworkingV1Api(), pod_exec=pod_exec or RecordingPodExec(), **options)


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return write_task(tmp_path, "Calc_Task", task_toml="[environment]\ncpus = 2\nmemory_mb = 1024\nstorage_mb = 4096\n"
                      "[environment.env]\nMODE = \"strict\"\n")


def test_fake_k8s_start_creates_labelled_pod_waits_and_stop_deletes(task: Path, tmp_path: Path) -> None:
    core, pod_exec = FakeCoreV1Api(pending_reads=3), RecordingPodExec()
    env = make_k8s_env(task, tmp_path, core=core, pod_exec=pod_exec, namespace="train", registry="reg.io/team",
                       project="proj", experiment="exp", step=4, pull_policy="Always")
    asyncio.run(env.start(force_build=False))
    name = env.pod_name
    assert env.container_id == name  # the same "sandbox is up" handle as the docker backend
    (pod,) = core.pods.values()
    manifest = pod.manifest
    assert manifest["metadata"]["name"] == name and name.startswith("rlkit-calc-task-")
    labels = manifest["metadata"]["labels"]
    assert {k: labels[k] for k in ("rlkit.managed", "rlkit.project", "rlkit.experiment", "rlkit.step",
                                   "rlkit.task")} == {"rlkit.managed": "1", "rlkit.project": "proj",
                                                      "rlkit.experiment": "exp", "rlkit.step": "4",
                                                      "rlkit.task": "Calc_Task"}
    assert labels["rlkit.session"] == env.session_id and "rlkit.network" not in labels
    (main,) = manifest["spec"]["containers"]
    assert main["image"] == "reg.io/team/rlkit-task/calc_task:latest"
    assert main["imagePullPolicy"] == "Always"
    assert main["resources"] == {"requests": {"cpu": "2", "memory": "1024Mi", "ephemeral-storage": "4096Mi"},
                                 "limits": {"cpu": "2", "memory": "1024Mi", "ephemeral-storage": "4096Mi"}}
    assert {"name": "MODE", "value": "strict"} in main["env"]
    assert pod.reads == 4  # three Pending reads, then Running
    # The trial's log dirs are made with one exec right after the pod runs; then the image is probed
    # for the verifier (before any agent), which this fake answers with nothing: no profile.
    call, probe = pod_exec.calls
    assert call[0] == name and call[1] == "train"
    assert "mkdir -p /logs/agent /logs/artifacts /logs/verifier" in call[2][2]
    assert probe[2][0] == "bash" and "probe" in probe[2][2] and env.image_profile is None

    asyncio.run(env.stop(delete=True))
    assert core.pods == {} and ("delete", "train", name, 0) in core.calls
    asyncio.run(env.stop(delete=True))  # idempotent
    assert sum(1 for c in core.calls if c[0] == "delete") == 1


def test_fake_k8s_no_network_task_gets_deny_all_policy_once(tmp_path: Path) -> None:
    offline = write_task(tmp_path, "offline", task_toml='[environment]\nnetwork_mode = "no-network"\n')
    core, net = FakeCoreV1Api(pending_reads=0), FakeNetworkingV1Api()
    envs = [make_k8s_env(offline, tmp_path, core=core, net=net) for _ in range(2)]
    for env in envs:
        asyncio.run(env.start(force_build=False))
    assert list(net.policies) == [("rlkit", "rlkit-no-network")]
    assert all(p.labels["rlkit.network"] == "none" for p in core.pods.values())
    assert len(core.pods) == 2


def test_fake_k8s_allowlist_gets_an_egress_policy_per_host_set(tmp_path: Path) -> None:
    """What harbor asks for when an in-pod agent on a no-network task needs its proxy."""
    from harbor.models.task.config import NetworkMode, NetworkPolicy

    offline = write_task(tmp_path, "offline", task_toml='[environment]\nnetwork_mode = "no-network"\n')
    core, net = FakeCoreV1Api(pending_reads=0), FakeNetworkingV1Api()
    proxy_only = NetworkPolicy(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=["10.0.0.5"])
    envs = [make_k8s_env(offline, tmp_path, core=core, net=net, network_policy=proxy_only) for _ in range(2)]
    for env in envs:
        env.validate_network_policy_support()
        asyncio.run(env.start(force_build=False))
    (policy,) = net.policies.values()
    assert policy["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}]}]
    label = policy["spec"]["podSelector"]["matchLabels"]["rlkit.network"]
    assert [p.labels["rlkit.network"] for p in core.pods.values()] == [label, label]


@pytest.mark.parametrize(("host", "message"), [("proxy.internal", "hostnames"),
                                               ("127.0.0.1", "loopback inside a pod is the pod itself")])
def test_fake_k8s_allowlist_rejects_what_a_network_policy_cannot_serve(tmp_path: Path, host: str,
                                                                       message: str) -> None:
    from harbor.models.task.config import NetworkMode, NetworkPolicy

    offline = write_task(tmp_path, "offline", task_toml='[environment]\nnetwork_mode = "no-network"\n')
    policy = NetworkPolicy(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=[host])
    with pytest.raises(ValueError, match=message):
        make_k8s_env(offline, tmp_path, network_policy=policy).validate_network_policy_support()


def test_fake_k8s_unpullable_image_fails_fast_and_deletes_pod(task: Path, tmp_path: Path) -> None:
    core = FakeCoreV1Api(unpullable={"rlkit-task/calc_task:latest"})
    env = make_k8s_env(task, tmp_path, core=core)
    with pytest.raises(SandboxError, match="ErrImagePull"):
        asyncio.run(env.start(force_build=False))
    assert core.pods == {} and env.pod_name is None


def test_fake_k8s_start_timeout_deletes_pod(task: Path, tmp_path: Path) -> None:
    core = FakeCoreV1Api(pending_reads=10**9)
    env = make_k8s_env(task, tmp_path, core=core, start_timeout_sec=0.1)
    with pytest.raises(SandboxError, match="not running after"):
        asyncio.run(env.start(force_build=False))
    assert core.pods == {}


def test_fake_k8s_create_failure_is_a_sandbox_error(task: Path, tmp_path: Path) -> None:
    class Refusing(FakeCoreV1Api):
        def create_namespaced_pod(self, namespace, body):
            raise RuntimeError("forbidden: exceeded quota")

    with pytest.raises(SandboxError, match="exceeded quota"):
        asyncio.run(make_k8s_env(task, tmp_path, core=Refusing()).start(force_build=False))


def test_fake_k8s_exec_wraps_cwd_env_user_and_reports_timeouts(task: Path, tmp_path: Path) -> None:
    replies = {"timeout": False}

    def reply(argv):
        if "sleep 99" in argv[2] and replies["timeout"]:
            return "partial", "", None
        return "out", "err", 5

    pod_exec = RecordingPodExec(reply=reply)
    env = make_k8s_env(task, tmp_path, core=FakeCoreV1Api(pending_reads=0), pod_exec=pod_exec)
    with pytest.raises(SandboxError, match="not running"):
        asyncio.run(env.exec("true"))

    async def scenario():
        await env.start(force_build=False)
        result = await env.exec("make test", cwd="/app", env={"X": "1"}, user="agent", timeout_sec=30)
        assert (result.stdout, result.stderr, result.return_code) == ("out", "err", 5)
        script = pod_exec.calls[-1][2][2]
        assert "cd /app" in script and "export MODE=strict X=1" in script
        assert "runuser -u agent -- bash -c 'make test'" in script
        assert pod_exec.calls[-1][4] == 30
        replies["timeout"] = True
        with pytest.raises(SandboxExecTimeout) as caught:
            await env.exec("sleep 99", timeout_sec=1)
        assert isinstance(caught.value, TimeoutError)
        # The timed-out command's pid file is used to kill its process tree.
        pid_file = pod_exec.calls[-2][2][2].split("echo $$ > ")[1].split(" ")[0]
        assert "PPid:" in pod_exec.calls[-1][2][2] and pid_file in pod_exec.calls[-1][2][2]

    asyncio.run(scenario())


def test_fake_k8s_upload_sends_base64_tar_of_exact_length(task: Path, tmp_path: Path) -> None:
    pod_exec = RecordingPodExec()
    env = make_k8s_env(task, tmp_path, core=FakeCoreV1Api(pending_reads=0), pod_exec=pod_exec)
    src = tmp_path / "payload"
    src.mkdir()
    (src / "a.txt").write_text("alpha")
    asyncio.run(env.start(force_build=False))
    asyncio.run(env.upload_dir(src, "/tests"))
    _pod, _ns, argv, stdin, _t = pod_exec.calls[-1]
    assert argv == ["bash", "-c", f"head -c {len(stdin)} | base64 -d | tar xf - -C /"]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(stdin))) as tar:
        assert tar.extractfile("tests/a.txt").read() == b"alpha"


def test_fake_k8s_download_missing_file_is_file_not_found(task: Path, tmp_path: Path) -> None:
    pod_exec = RecordingPodExec(reply=lambda argv: ("", "tar: nope: Cannot stat: No such file or directory", 2))
    env = make_k8s_env(task, tmp_path, core=FakeCoreV1Api(pending_reads=0),
                       pod_exec=RecordingPodExec())
    asyncio.run(env.start(force_build=False))
    env._pod_exec = pod_exec
    with pytest.raises(FileNotFoundError):
        asyncio.run(env.download_file("/nope", tmp_path / "nope"))


def test_fake_k8s_unknown_option_is_rejected(task: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Unknown option 'namespce'"):
        make_k8s_env(task, tmp_path, namespce="typo")


def test_fake_k8s_cleanup_deletes_labelled_pods_by_project(tmp_path: Path, task: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from rlkit.ops.cleanup import CleanupReport, clean_k8s

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv("RLKIT_OWNER_PID", str(gone.pid))  # the pods' owner is dead: they are orphans
    core = FakeCoreV1Api(pending_reads=0)
    for project in ("a", "a", "b"):
        asyncio.run(make_k8s_env(task, tmp_path, core=core, project=project).start(force_build=False))
    core.pods[("rlkit", "unrelated")] = type(next(iter(core.pods.values())))(
        {"metadata": {"name": "unrelated", "labels": {"app": "web"}}, "spec": {"containers": [{"image": "x"}]}})

    dry = list(delete_labelled_pods(core, "rlkit", {"rlkit.managed": "1", "rlkit.project": "a"}, dry_run=True))
    assert len(dry) == 2 and len(core.pods) == 4

    report = CleanupReport()
    clean_k8s(report, "a", None, namespace="rlkit", core_api=core)
    assert [r.kind for r in report.removed] == ["pod", "pod"]
    assert all("project=a" in r.detail for r in report.removed)
    assert sorted(p.labels.get("rlkit.project", "-") for p in core.pods.values()) == ["-", "b"]
    again = CleanupReport()
    clean_k8s(again, "a", None, namespace="rlkit", core_api=core)
    assert again.nothing_done


def test_fake_k8s_cleanup_keeps_live_and_other_users_pods(tmp_path: Path, task: Path) -> None:
    from rlkit.ops.cleanup import CleanupReport, Policy, clean_k8s

    core = FakeCoreV1Api(pending_reads=0)
    asyncio.run(make_k8s_env(task, tmp_path, core=core, project="a", experiment="e").start(force_build=False))
    report = CleanupReport()
    clean_k8s(report, "a", None, namespace="rlkit", core_api=core)  # this process owns it: live
    assert report.removed == [] and "live: owner pid" in report.kept[0].detail and len(core.pods) == 1
    report = CleanupReport()
    clean_k8s(report, "a", "e", namespace="rlkit", core_api=core, policy=Policy(tmp_path, force=True))
    assert [r.kind for r in report.removed] == ["pod"] and core.pods == {}


@pytest.mark.docker
def test_fake_k8s_exec_and_transfer_on_docker_backed_pods(tmp_path: Path, base_image: str) -> None:
    core, net, pods = docker_backed_cluster()
    prebuilt = write_task(tmp_path, "prebuilt", task_toml=f'[environment]\ndocker_image = "{base_image}"\n'
                          'workdir = "/srv"\n')
    env = make_k8s_env(prebuilt, tmp_path, core=core, net=net, pod_exec=pods)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("file")

    async def scenario():
        await env.start(force_build=False)
        try:
            result = await env.exec("pwd; echo $V; id -un", env={"V": "v1"}, user="nobody", cwd="/tmp")
            assert result.stdout.split() == ["/tmp", "v1", "nobody"]
            await env.upload_dir(src, "/data/in")
            await env.upload_file(src / "sub" / "f.txt", "/one/f.txt")
            assert (await env.exec("cat /data/in/sub/f.txt /one/f.txt")).stdout == "filefile"
            await env.exec("mkdir -p /logs/verifier/x && echo 1 > /logs/verifier/reward.txt && echo y > /logs/verifier/x/y")
            await env.download_dir("/logs/verifier", tmp_path / "verifier")
            await env.download_file("/logs/verifier/reward.txt", tmp_path / "reward.txt")
            with pytest.raises(SandboxExecTimeout):
                await env.exec("sleep 300 & sleep 301", timeout_sec=1)
            assert "sleep 30" not in (await env.exec("ps -eo args")).stdout
        finally:
            await env.stop(delete=True)

    asyncio.run(scenario())
    assert (tmp_path / "verifier" / "x" / "y").read_text() == "y\n"
    assert (tmp_path / "reward.txt").read_text() == "1\n"
    assert pods.containers == {}


@pytest.mark.docker
def test_fake_k8s_harbor_trial_oracle_and_nop(tmp_path: Path, base_image: str, calc_task: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """harbor's Trial runs unchanged on the k8s backend (loaded by import_path)."""
    from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
    from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig
    from harbor.trial.trial import Trial

    from rlkit.sandbox import IMPORT_PATHS
    from rlkit.sandbox.docker import DockerEnvironment

    # The docker-backed fake cluster runs the task image; make sure it is built.
    from tests.sandbox._helpers import make_env

    docker_env = make_env(calc_task, tmp_path)
    asyncio.run(docker_env._ensure_image(docker_env.image_ref(), force_build=False))
    assert isinstance(docker_env, DockerEnvironment)

    core, net, pods = docker_backed_cluster()
    monkeypatch.setattr(KubernetesEnvironment, "client_factory", lambda opts: (core, net, pods))

    async def run(agent: str):
        config = TrialConfig(task=TaskConfig(path=calc_task), trials_dir=tmp_path / agent,
                             agent=AgentConfig(name=agent),
                             environment=TrialEnvironmentConfig(import_path=IMPORT_PATHS["k8s"],
                                                                kwargs={"poll_interval_sec": 0.05,
                                                                        "image": task_image_ref(calc_task.name)}))
        return await (await Trial.create(config)).run()

    oracle, nop = asyncio.run(run("oracle")), asyncio.run(run("nop"))
    assert oracle.exception_info is None and oracle.verifier_result.rewards == {"reward": 1.0}
    assert nop.exception_info is None and nop.verifier_result.rewards == {"reward": 0.0}
    assert core.pods == {} and pods.containers == {}


def test_fake_k8s_missing_cluster_config_is_a_user_error(task: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.errors import UserError
    from rlkit.sandbox.k8s import load_core_api

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    with pytest.raises(UserError, match="no kubernetes cluster") as caught:
        load_core_api()
    assert "BACKEND=docker" in caught.value.fix
