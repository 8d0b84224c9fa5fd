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


FAKE_DOCKERD = """#!{python}
# Stand-in dockerd: answers GET /_ping on the socket given by -H unix://PATH.
import http.server, os, socketserver, sys
path = sys.argv[sys.argv.index("-H") + 1].removeprefix("unix://")
open(path + ".started", "a").write(str(os.getpid()) + "\\n")
class Ping(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/_ping" else 404); self.end_headers(); self.wfile.write(b"OK")
    def address_string(self):
        return "local"
    def log_message(self, *args):
        pass
class Server(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)
Server(path, Ping).serve_forever()
"""


def test_ensure_dockerd_starts_a_daemon_when_none_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start path, against a stand-in `dockerd` on PATH (a second real daemon would
    fight the shared one over docker0 and iptables)."""
    import sys

    if os.geteuid() != 0:
        pytest.skip("ensure_dockerd only starts a daemon as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dockerd"
    fake.write_text(FAKE_DOCKERD.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    sock = str(tmp_path / "d.sock")
    assert dockerd_answers(sock) is False
    try:
        assert ensure_dockerd(socket_path=sock, log_path=tmp_path / "d.log", timeout=30) == sock
        assert dockerd_answers(sock) is True
        assert ensure_dockerd(socket_path=sock) == sock
        assert len(Path(sock + ".started").read_text().split()) == 1  # idempotent: started once
    finally:
        started = Path(sock + ".started")
        for pid in started.read_text().split() if started.exists() else []:
            os.kill(int(pid), 9)


def test_ensure_dockerd_reports_a_daemon_that_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.errors import SandboxError

    if os.geteuid() != 0:
        pytest.skip("ensure_dockerd only starts a daemon as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dockerd").write_text("#!/bin/sh\necho 'failed to start daemon: boom' >&2\nexit 1\n")
    (bin_dir / "dockerd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(SandboxError, match="exited with code 1"):
        ensure_dockerd(socket_path=str(tmp_path / "d.sock"), log_path=tmp_path / "d.log", timeout=30)
    assert "boom" in (tmp_path / "d.log").read_text()


@pytest.mark.docker
def test_images_dockerd_cli(dockerd: str) -> None:
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "dockerd"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"✓ dockerd answers on {dockerd}"
