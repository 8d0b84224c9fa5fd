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
