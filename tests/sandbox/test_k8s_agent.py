"""The mounted agent on kubernetes, against a fake API (no cluster can run here): an image volume where
the API server keeps one (asked by a server-side dry run), else an init container filling an emptyDir;
read-only in the task's container either way, linked after the image profile."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rlkit.sandbox import agent_volume
from rlkit.sandbox.agent_volume import AgentMount
from tests.sandbox._helpers import write_task
from tests.sandbox.fake_k8s import FakeCoreV1Api, RecordingPodExec
from tests.sandbox.test_k8s import make_k8s_env

pytestmark = pytest.mark.fake_k8s

MOUNT = AgentMount(image="reg.io/rlkit/agent-cc:2.1.332-m1", scaffold="cc", target="/opt/rlkit-agents/cc",
                   links={"/usr/local/bin/claude": "/opt/rlkit-agents/cc/claude"})


@pytest.fixture(autouse=True)
def _fresh_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_volume, "_k8s_choices", {})


def _start(tmp_path: Path, core: FakeCoreV1Api) -> tuple[dict, RecordingPodExec]:
    task = write_task(tmp_path, "calc")
    pod_exec = RecordingPodExec()
    env = make_k8s_env(task, tmp_path, core=core, pod_exec=pod_exec, namespace="train",
                       agent_mount=MOUNT.model_dump())
    asyncio.run(env.start(force_build=False))
    [pod] = core.pods.values()
    return pod.manifest, pod_exec


def test_fake_k8s_image_volume_where_the_api_server_keeps_it(tmp_path: Path) -> None:
    core = FakeCoreV1Api(image_volumes=True)
    manifest, pod_exec = _start(tmp_path, core)
    spec = manifest["spec"]
    assert spec["volumes"] == [{"name": "rlkit-agent", "image": {"reference": MOUNT.image,
                                                                  "pullPolicy": "IfNotPresent"}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "rlkit-agent", "mountPath": MOUNT.target,
                                                      "readOnly": True}]
    assert "initContainers" not in spec
    assert spec["containers"][0]["image"].endswith("calc:latest")  # the task image as its author built it
    assert [c[0] for c in core.calls].count("dry-run") == 1  # asked once, nothing created by the question
    # The link on PATH is made after the image profile (the last exec), never before it.
    assert "ln -sfn /opt/rlkit-agents/cc/claude /usr/local/bin/claude" in " ".join(pod_exec.calls[-1][2])


def test_fake_k8s_init_container_fills_an_empty_dir_where_it_does_not(tmp_path: Path) -> None:
    core = FakeCoreV1Api(image_volumes=False)
    manifest, _ = _start(tmp_path, core)
    spec = manifest["spec"]
    assert spec["volumes"] == [{"name": "rlkit-agent", "emptyDir": {}}]
    [init] = spec["initContainers"]
    assert init["image"] == MOUNT.image and init["command"] == ["cp", "-a", "/opt/rlkit-agents/cc/.",
                                                                "/rlkit-agent-fill/"]
    assert spec["containers"][0]["volumeMounts"][0]["readOnly"] is True


def test_fake_k8s_a_refused_probe_takes_the_init_container() -> None:
    choice, why = agent_volume.k8s_agent_delivery(FakeCoreV1Api(refuse_dry_run=True), "train", MOUNT.image)
    assert choice == "init-container" and "refused" in why
