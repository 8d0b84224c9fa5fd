"""Labels, dockerd detection and the exec process-tree killer."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from rlkit.sandbox import BACKENDS, IMPORT_PATHS
from rlkit.sandbox._exec_kill import kill_process_tree, process_tree
from rlkit.sandbox.dockerd import dockerd_answers, ensure_dockerd
from rlkit.sandbox.labels import SandboxLabels, label_value, selector


def test_label_values_are_k8s_safe() -> None:
    assert label_value("my proj/exp:1") == "my-proj-exp-1"
    assert label_value("-x-") == "x"
    assert len(label_value("a" * 100)) == 63
    assert label_value(12) == "12"


def test_labels_from_env_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLKIT_PROJECT", "envproj")
    monkeypatch.setenv("EXP_NAME", "envexp")
    monkeypatch.setenv("RLKIT_STEP", "9")
    labels = SandboxLabels.from_env(session="s1").as_dict()
    assert labels["rlkit.managed"] == "1"
    assert (labels["rlkit.project"], labels["rlkit.experiment"], labels["rlkit.step"]) == ("envproj", "envexp", "9")
    assert labels["rlkit.owner_pid"] == str(os.getpid()) and labels["rlkit.session"] == "s1"
    assert SandboxLabels.from_env(project="p", step=None).as_dict()["rlkit.project"] == "p"
    assert selector("p x", None) == {"rlkit.managed": "1", "rlkit.project": "p-x"}


def test_backend_registry_is_lazy() -> None:
    assert BACKENDS.names() == ["docker", "k8s"] == sorted(IMPORT_PATHS)
    assert BACKENDS.get("k8s").__name__ == "KubernetesEnvironment"


def test_dockerd_answers_is_false_for_a_dead_socket(tmp_path: Path) -> None:
    assert dockerd_answers(str(tmp_path / "nope.sock")) is False


@pytest.mark.docker
def test_ensure_dockerd_is_idempotent(dockerd: str) -> None:
    assert dockerd_answers(dockerd) is True
    assert ensure_dockerd() == dockerd


def test_kill_process_tree_kills_descendants() -> None:
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 301 & wait"])
    for _ in range(100):
        if len(process_tree(proc.pid)) == 3:
            break
        time.sleep(0.05)
    tree = process_tree(proc.pid)
    assert tree[0] == proc.pid and len(tree) == 3
    assert kill_process_tree(proc.pid) == 3
    proc.wait(timeout=10)
    for pid in tree[1:]:
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                break
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.docker
@pytest.mark.slow
def test_ensure_dockerd_starts_a_daemon_when_none_answers(tmp_path: Path, dockerd: str) -> None:
    """A second, private daemon (own socket and data root) is started, then found again."""
    import signal

    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    sock = str(tmp_path / "d.sock")
    pid_file = tmp_path / "d.pid"
    extra = ("--data-root", str(tmp_path / "data"), "--exec-root", str(tmp_path / "exec"), "--pidfile",
             str(pid_file), "--bridge", "none", "--iptables=false", "--ip-masq=false")
    assert dockerd_answers(sock) is False
    try:
        assert ensure_dockerd(socket_path=sock, extra_args=extra, log_path=tmp_path / "d.log") == sock
        assert dockerd_answers(sock) is True
        first_pid = pid_file.read_text().strip()
        assert ensure_dockerd(socket_path=sock, extra_args=extra) == sock
        assert pid_file.read_text().strip() == first_pid  # idempotent: no second daemon
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
            for _ in range(200):
                if not dockerd_answers(sock):
                    break
                time.sleep(0.05)


@pytest.mark.docker
def test_images_dockerd_cli(dockerd: str) -> None:
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "dockerd"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"✓ dockerd answers on {dockerd}"
