"""Pure builders of the k8s backend: pod manifest, resources, exec wrapping (run locally)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkit.sandbox import k8s_spec as spec
from rlkit.sandbox.k8s import drain_ws, pod_state


def test_pod_name_is_dns_1123_and_bounded() -> None:
    name = spec.pod_name("My_Task.Name__AbC123__env" * 5, "a1b2c3")
    assert len(name) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name.startswith("rlkit-my-task-name-") and name.endswith("-a1b2c3")
    assert spec.pod_name("__", "x1") == "rlkit-trial-x1"


def test_resources_requests_limits_and_units() -> None:
    res = spec.PodResources(cpu_request=0.5, cpu_limit=2, memory_request_mb=512, memory_limit_mb=1024,
                            storage_mb=2048, gpus=1)
    assert res.as_dict() == {
        "requests": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "2048Mi"},
        "limits": {"cpu": "2", "memory": "1024Mi", "ephemeral-storage": "2048Mi", "nvidia.com/gpu": "1"},
    }
    assert spec.PodResources().as_dict() == {}
    assert spec.PodResources(cpu_limit=1.25).as_dict() == {"limits": {"cpu": "1250m"}}


def test_pod_manifest_full() -> None:
    manifest = spec.build_pod_manifest(spec.PodSpecInput(
        name="rlkit-t-1", namespace="train", image="reg.example/rlkit-task/t:latest",
        labels={"rlkit.managed": "1", "rlkit.project": "p"},
        resources=spec.PodResources(cpu_request=1, cpu_limit=1, memory_request_mb=256, memory_limit_mb=256),
        env={"B": "2", "A": "1"}, workdir="/app", pull_policy="Always", no_network=True,
        service_account="runner", image_pull_secrets=("regcred",), node_selector={"pool": "cpu"},
        tolerations=({"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"},), active_deadline_sec=3600,
        hostname="0123456789ab"))
    assert manifest["metadata"] == {"name": "rlkit-t-1", "namespace": "train",
                                    "labels": {"rlkit.managed": "1", "rlkit.project": "p", "rlkit.network": "none"}}
    pod = manifest["spec"]
    (main,) = pod["containers"]
    assert main == {
        "name": "main", "image": "reg.example/rlkit-task/t:latest", "imagePullPolicy": "Always",
        "command": ["sleep", "infinity"], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "workingDir": "/app",
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
    }
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 0
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["serviceAccountName"] == "runner" and pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "cpu"} and pod["tolerations"][0]["key"] == "sandbox"
    assert pod["activeDeadlineSeconds"] == 3600 and pod["hostname"] == "0123456789ab"


def test_pod_manifest_minimal_leaves_optional_fields_out() -> None:
    manifest = spec.build_pod_manifest(spec.PodSpecInput(name="p", namespace="n", image="i", labels={}))
    (main,) = manifest["spec"]["containers"]
    assert set(main) == {"name", "image", "imagePullPolicy", "command"}
    assert main["imagePullPolicy"] == "IfNotPresent"
    assert not {"serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations",
                "activeDeadlineSeconds"} & set(manifest["spec"])
    assert manifest["metadata"]["labels"] == {}


def test_selector_and_network_policy() -> None:
    assert spec.label_selector({"rlkit.project": "p", "rlkit.managed": "1"}) == "rlkit.managed=1,rlkit.project=p"
    policy = spec.no_network_policy_manifest("train")
    assert policy["spec"] == {"podSelector": {"matchLabels": {"rlkit.network": "none"}},
                              "policyTypes": ["Ingress", "Egress"]}
    assert policy["metadata"]["namespace"] == "train"


def test_wrap_exec_applies_cwd_env_user_and_cleans_pid_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "exec.pid"
    argv = spec.wrap_exec("echo \"$A\"; pwd; id -un; exit 4", cwd=str(tmp_path), env={"A": "x y'z"},
                          user="nobody", pid_file=str(pid_file))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout.splitlines()) == (4, ["x y'z", str(tmp_path), "nobody"])
    assert not pid_file.exists()
    # A failing cd stops the command: its `;` cannot escape the && chain.
    argv = spec.wrap_exec("echo ran; echo ran-too", cwd=str(tmp_path / "missing"))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    as_uid = subprocess.run(spec.wrap_exec("id -u", user=65534), capture_output=True, text=True, check=False)
    assert as_uid.stdout.strip() == "65534"
    as_root = spec.wrap_exec("id -u", user="root")
    assert "runuser" not in as_root[2] and "setpriv" not in as_root[2]


def test_kill_tree_command_kills_the_command_and_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "exec.pid"
    marker = f"{tmp_path}/sleeper"
    argv = spec.wrap_exec(f"bash -c 'exec -a {marker} sleep 300' & exec -a {marker}2 sleep 301",
                          pid_file=str(pid_file))
    proc = subprocess.Popen(argv)
    for _ in range(100):
        if pid_file.exists() and _pgrep(marker):
            break
        time.sleep(0.05)
    assert len(_pgrep(marker)) >= 2  # both sleeps (and the shells that started them)
    subprocess.run(spec.kill_tree_command(str(pid_file)), check=True)
    proc.wait(timeout=10)
    for _ in range(100):
        if not _pgrep(marker):
            break
        time.sleep(0.05)
    assert _pgrep(marker) == []


def _pgrep(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout
    return out.split()


def test_transfer_commands() -> None:
    assert spec.upload_command(128) == ["bash", "-c", "head -c 128 | base64 -d | tar xf - -C /"]
    assert spec.download_command("/logs/verifier/") == ["bash", "-c", "tar cf - -C /logs verifier | base64 -w0"]
    assert spec.download_command("/top") == ["bash", "-c", "tar cf - -C / top | base64 -w0"]


class FakeWS:
    """Look-alike of kubernetes.stream.ws_client.WSClient."""

    def __init__(self, frames: list[tuple[str, str]], code: int | None, forever: bool = False) -> None:
        self.frames, self.code, self.forever = list(frames), code, forever
        self.buffers = {"out": "", "err": ""}
        self.stdin: list[str] = []
        self.closed = False

    def is_open(self) -> bool:
        return self.forever or bool(self.frames)

    def update(self, timeout: float = 0) -> None:
        if self.frames:
            channel, text = self.frames.pop(0)
            self.buffers[channel] += text
        elif self.forever:
            time.sleep(0.01)

    def peek_stdout(self) -> bool:
        return bool(self.buffers["out"])

    def peek_stderr(self) -> bool:
        return bool(self.buffers["err"])

    def read_stdout(self) -> str:
        text, self.buffers["out"] = self.buffers["out"], ""
        return text

    def read_stderr(self) -> str:
        text, self.buffers["err"] = self.buffers["err"], ""
        return text

    def write_stdin(self, data: str) -> None:
        self.stdin.append(data)

    @property
    def returncode(self) -> int | None:
        return self.code

    def close(self) -> None:
        self.closed = True


def test_drain_ws_collects_output_and_exit_code() -> None:
    ws = FakeWS([("out", "a"), ("err", "e1"), ("out", "b")], code=3)
    assert drain_ws(ws, b"aGk=", None) == ("ab", "e1", 3)
    assert ws.stdin == ["aGk="] and ws.closed


def test_drain_ws_times_out_with_none_code() -> None:
    ws = FakeWS([("out", "partial")], code=None, forever=True)
    assert drain_ws(ws, None, 0.2) == ("partial", "", None)
    assert ws.closed


@pytest.mark.parametrize(("status", "expected"), [
    (SimpleNamespace(phase="Running", container_statuses=[SimpleNamespace(ready=True, state=None)]), "running"),
    (SimpleNamespace(phase="Running", container_statuses=[SimpleNamespace(ready=False, state=None)]),
     "pending: container not ready"),
    (SimpleNamespace(phase="Pending", container_statuses=None), "pending: Pending"),
    (SimpleNamespace(phase="Pending", container_statuses=[SimpleNamespace(ready=False, state=SimpleNamespace(
        waiting=SimpleNamespace(reason="ImagePullBackOff", message="back-off")))]), "failed: ImagePullBackOff back-off"),
    (SimpleNamespace(phase="Failed", container_statuses=[], reason="Evicted"), "failed: pod phase Failed (Evicted)"),
    (None, "pending: Pending"),
])
def test_pod_state(status: SimpleNamespace | None, expected: str) -> None:
    assert pod_state(SimpleNamespace(status=status)) == expected


def test_allowlist_policy_allows_egress_to_the_hosts_only() -> None:
    hosts = ("10.0.0.5", "fd00::7", "192.168.0.0/16")
    label = spec.allowlist_label(hosts)
    assert label == spec.allowlist_label(tuple(reversed(hosts))) and label.startswith("allow-")
    assert label != spec.allowlist_label(("10.0.0.6",))
    policy = spec.allowlist_policy_manifest("train", hosts)
    assert policy["metadata"]["name"] == f"rlkit-{label}"
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"rlkit.network": label}}, "policyTypes": ["Ingress", "Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}, {"ipBlock": {"cidr": "192.168.0.0/16"}},
                           {"ipBlock": {"cidr": "fd00::7/128"}}]}]}
    manifest = spec.build_pod_manifest(spec.PodSpecInput(name="p", namespace="train", image="i", labels={},
                                                         allowed_hosts=hosts))
    assert manifest["metadata"]["labels"]["rlkit.network"] == label
    with pytest.raises(ValueError):
        spec.allowlist_cidrs(["proxy.internal"])  # a NetworkPolicy matches addresses, not names
