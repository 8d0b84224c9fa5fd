"""A fake kubernetes API for the k8s backend's tests (no cluster can run here).

`FakeCoreV1Api` keeps pods in memory and walks them Pending → Running on reads.
`DockerPodExec` backs each fake pod with a real docker container (created when the pod
is created), so exec, tar-over-exec transfers and timeout kills run for real.
`RecordingPodExec` just records argv for pure lifecycle tests.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class FakeApiException(Exception):
    def __init__(self, status: int, reason: str = "") -> None:
        super().__init__(f"({status}) {reason}")
        self.status = status


@dataclass
class FakePod:
    manifest: dict
    reads: int = 0
    deleted: bool = False

    @property
    def name(self) -> str:
        return self.manifest["metadata"]["name"]

    @property
    def labels(self) -> dict[str, str]:
        return self.manifest["metadata"].get("labels", {})


@dataclass
class FakeCoreV1Api:
    """In-memory pods; `pending_reads` reads of Pending before Running; images in
    `unpullable` get ErrImagePull; `on_create`/`on_delete` hooks back pods with containers."""

    pending_reads: int = 1
    unpullable: set[str] = field(default_factory=set)
    pods: dict[tuple[str, str], FakePod] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    on_create: Any = None
    on_delete: Any = None
    image_volumes: bool = True  # False: an API server without the ImageVolume feature (drops the field)
    refuse_dry_run: bool = False

    def create_namespaced_pod(self, namespace: str, body: dict, dry_run: str | None = None, **_: Any) -> dict:
        if dry_run:  # validated and answered, never stored (the server side of `--dry-run=server`)
            self.calls.append(("dry-run", namespace, body["metadata"]["name"]))
            if self.refuse_dry_run:
                raise FakeApiException(403, "Forbidden")
            volumes = [v for v in body["spec"].get("volumes", []) if self.image_volumes or "image" not in v]
            return {**body, "spec": {**body["spec"], "volumes": volumes}}
        self.calls.append(("create", namespace, body["metadata"]["name"]))
        key = (namespace, body["metadata"]["name"])
        if key in self.pods:
            raise FakeApiException(409, "AlreadyExists")
        self.pods[key] = FakePod(body)
        if self.on_create:
            self.on_create(namespace, body)
        return body

    def read_namespaced_pod(self, name: str, namespace: str) -> SimpleNamespace:
        self.calls.append(("read", namespace, name))
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise FakeApiException(404, "NotFound")
        pod.reads += 1
        image = pod.manifest["spec"]["containers"][0]["image"]
        if image in self.unpullable:
            waiting = SimpleNamespace(reason="ErrImagePull", message=f"pull access denied for {image}")
            statuses = [SimpleNamespace(ready=False, state=SimpleNamespace(waiting=waiting))]
            return SimpleNamespace(status=SimpleNamespace(phase="Pending", container_statuses=statuses))
        if pod.reads <= self.pending_reads:
            statuses = [SimpleNamespace(ready=False, state=SimpleNamespace(
                waiting=SimpleNamespace(reason="ContainerCreating", message="")))]
            return SimpleNamespace(status=SimpleNamespace(phase="Pending", container_statuses=statuses))
        statuses = [SimpleNamespace(ready=True, state=SimpleNamespace(waiting=None))]
        return SimpleNamespace(status=SimpleNamespace(phase="Running", container_statuses=statuses))

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> None:
        self.calls.append(("delete", namespace, name, grace_period_seconds))
        if self.pods.pop((namespace, name), None) is None:
            raise FakeApiException(404, "NotFound")
        if self.on_delete:
            self.on_delete(namespace, name)

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> SimpleNamespace:
        wanted = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        items = [SimpleNamespace(metadata=SimpleNamespace(name=pod.name, labels=pod.labels))
                 for (ns, _), pod in sorted(self.pods.items())
                 if ns == namespace and all(pod.labels.get(k) == v for k, v in wanted.items())]
        return SimpleNamespace(items=items)


@dataclass
class FakeNetworkingV1Api:
    policies: dict[tuple[str, str], dict] = field(default_factory=dict)

    def create_namespaced_network_policy(self, namespace: str, body: dict) -> dict:
        key = (namespace, body["metadata"]["name"])
        if key in self.policies:
            raise FakeApiException(409, "AlreadyExists")
        self.policies[key] = body
        return body


@dataclass
class RecordingPodExec:
    """Records every exec; answers with `reply(argv)` -> (stdout, stderr, code)."""

    reply: Any = None
    calls: list[tuple[str, str, list[str], bytes | None, float | None]] = field(default_factory=list)

    def __call__(self, pod: str, namespace: str, argv: list[str], stdin: bytes | None,
                 timeout_sec: float | None) -> tuple[str, str, int | None]:
        self.calls.append((pod, namespace, argv, stdin, timeout_sec))
        return self.reply(argv) if self.reply else ("", "", 0)


@dataclass
class DockerPodExec:
    """Each fake pod is a real container of the pod's image; exec is `docker exec -i`."""

    containers: dict[str, str] = field(default_factory=dict)

    def create(self, namespace: str, body: dict) -> None:
        container = body["spec"]["containers"][0]
        args = ["docker", "run", "-d", "--rm", "--label", "rlkit.test=fake-k8s"]
        for item in container.get("env", []):
            args += ["-e", f"{item['name']}={item['value']}"]
        if container.get("workingDir"):
            args += ["-w", container["workingDir"]]
        args += [container["image"], *container["command"]]
        cid = subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
        self.containers[body["metadata"]["name"]] = cid

    def delete(self, namespace: str, name: str) -> None:
        cid = self.containers.pop(name, None)
        if cid:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)

    def __call__(self, pod: str, namespace: str, argv: list[str], stdin: bytes | None,
                 timeout_sec: float | None) -> tuple[str, str, int | None]:
        cid = self.containers[pod]
        try:
            proc = subprocess.run(["docker", "exec", "-i", cid, *argv], input=stdin or b"",
                                  capture_output=True, timeout=timeout_sec, check=False)
        except subprocess.TimeoutExpired as exc:
            return (exc.stdout or b"").decode(), (exc.stderr or b"").decode(), None
        return proc.stdout.decode(), proc.stderr.decode(), proc.returncode


def docker_backed_cluster() -> tuple[FakeCoreV1Api, FakeNetworkingV1Api, DockerPodExec]:
    pods = DockerPodExec()
    core = FakeCoreV1Api(on_create=pods.create, on_delete=pods.delete)
    return core, FakeNetworkingV1Api(), pods
