from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from rlkit.validate.findings import Status
from rlkit.validate.system import checkpoint_bytes, port_in_use
from tests.validate.helpers import FakeDockerDaemon


def only(report, check: str):
    return report.by_check(check)


def test_artifacts_fresh_resume_and_clobber(ws) -> None:
    (f,) = only(ws.preflight(ws.config(), only=["artifacts"]), "artifacts")
    assert f.status is Status.OK and "fresh run" in f.message
    out = ws.root / "out"
    ckpt = out / "checkpoints" / "proj" / "exp"
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("30")
    (f,) = only(ws.preflight(ws.config(), only=["artifacts"]), "artifacts")
    assert f.status is Status.OK and f.message.startswith("resume") and "global_step_30" in f.message
    (f,) = only(ws.preflight(ws.config(RESUME_MODE="disable"), only=["artifacts"]), "artifacts")
    assert f.status is Status.WARN and f.message.startswith("clobber")
    (out / "logs").mkdir()
    (out / "logs" / "other.log").write_text("")
    (out / "logs" / "exp2.log").write_text("step:1\n")
    (f,) = only(ws.preflight(ws.config(EXP_NAME="exp2"), only=["artifacts"]), "artifacts")
    assert f.status is Status.WARN and "logs/exp2.log" in f.message and "new EXP_NAME" in f.fix


def test_docker_backend_unreachable_then_reachable(ws) -> None:
    (f,) = only(ws.preflight(ws.config(), only=["backend"]), "backend")
    assert f.status is Status.FATAL and "docker daemon not reachable" in f.message and "dockerd" in f.fix
    sock = ws.root / "d.sock"
    ws.write_site(DOCKER_HOST=f"unix://{sock}")
    with FakeDockerDaemon(sock):
        (f,) = only(ws.preflight(ws.config(), only=["backend"]), "backend")
    assert f.status is Status.OK


def test_k8s_backend_without_kubeconfig_is_fatal(ws) -> None:
    ws.write_site(KUBECONFIG=ws.root / "missing-kubeconfig")
    (f,) = only(ws.preflight(ws.config(BACKEND="k8s"), only=["backend"]), "backend")
    assert f.status is Status.FATAL and "kube config" in f.message and f.key == "KUBECONFIG"


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
current-context: c
contexts: [{{name: c, context: {{cluster: k, user: u}}}}]
clusters: [{{name: k, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{}}}}]
""")
    return path


def test_k8s_backend_reachable_and_namespace(ws) -> None:
    with socket.socket() as listener:  # stands in for an API server: only the TCP connect is tested
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        ws.write_site(KUBECONFIG=_kubeconfig(ws.root / "kc", f"https://127.0.0.1:{port}"), K8S_NAMESPACE="rl")
        (f,) = only(ws.preflight(ws.config(BACKEND="k8s"), only=["backend"]), "backend")
        assert f.status is Status.OK and "namespace rl" in f.message
        ws.write_site(K8S_NAMESPACE="Bad_NS")  # not a kubernetes name: its type's range says so
        (f,) = only(ws.preflight(ws.config(BACKEND="k8s"), only=["types"]), "types")
        assert f.status is Status.FATAL and f.key == "K8S_NAMESPACE"
    ws.write_site(K8S_NAMESPACE="rl")
    (f,) = only(ws.preflight(ws.config(BACKEND="k8s"), only=["backend"]), "backend")
    assert f.status is Status.FATAL and "unreachable" in f.message


def test_ports_free_and_busy(ws) -> None:
    (f,) = only(ws.preflight(ws.config(), only=["ports"]), "ports")
    assert f.status is Status.OK and "RAY_PORT" not in f.message  # a one-machine run's Ray takes free ports
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ws.write_site(PROXY_PORT=busy)
        found = only(ws.preflight(ws.config(TRAINER="local"), only=["ports"]), "ports")
        verl = only(ws.preflight(ws.config(TRAINER="verl"), only=["ports"]), "ports")
    assert [(x.status, x.key) for x in found] == [(Status.FATAL, "PROXY_PORT")]
    assert "cleanup_before_run.sh" in found[0].fix
    # the fix names a port that is free, so a second run on this machine can take it as written
    suggested = int(re.search(r"set PROXY_PORT=(\d+)", found[0].fix).group(1))
    assert suggested != busy and not port_in_use(suggested)
    # verl's agent-loop workers run their proxies on free ports: PROXY_PORT is not theirs
    assert [x.status for x in verl] == [Status.OK] and "PROXY_PORT" not in verl[0].message


def test_a_busy_ray_port_refuses_only_a_cluster_head(ws) -> None:
    """A second one-machine run (local or verl) beside a Ray on RAY_PORT goes ahead; a cluster head
    (RAY_HEAD_ADDRESS names this machine), whose workers are told RAY_PORT, is refused."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        ws.write_site(RAY_PORT=holder.getsockname()[1])
        for trainer in ("local", "verl"):
            (f,) = only(ws.preflight(ws.config(TRAINER=trainer), only=["ports"]), "ports")
            assert f.status is Status.OK and "RAY_PORT" not in f.message, (trainer, f.message)
        ws.write_site(RAY_HEAD_ADDRESS="127.0.0.1", NNODES=1)
        found = only(ws.preflight(ws.config(TRAINER="verl"), only=["ports"]), "ports")
    assert [(x.status, x.key) for x in found] == [(Status.FATAL, "RAY_PORT")]


def test_ray_port_is_only_checked_on_the_head(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="192.0.2.77")  # TEST-NET address: never local
    (f,) = only(ws.preflight(ws.config(), only=["ports"]), "ports")
    assert "RAY_PORT" not in f.message


def test_disk_estimate_and_verdicts(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    assert checkpoint_bytes(2 * 10**9, {"torch_dtype": "bfloat16"}) == 10**9 * 12 + 2 * 10**9
    (f,) = only(ws.preflight(ws.config(), only=["disk"]), "disk")
    assert f.status is Status.OK and "per checkpoint" in f.message
    import shutil

    from rlkit.validate import system

    monkeypatch.setattr(system.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10, 10, 1024))
    (f,) = only(ws.preflight(ws.config(), only=["disk"]), "disk")
    assert f.status is Status.FATAL and f.key == "OUTPUT_DIR"
