"""Make sure a Docker daemon answers on the local socket, starting one if needed.

CI machines and this dev box have Debian's docker.io installed but nothing starts
dockerd, so tests and `rlkit images base` call `ensure_dockerd()` first. It is
idempotent and cheap when the daemon already answers (one HTTP ping).
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from rlkit.errors import SandboxError, UserError

DEFAULT_SOCKET = "/var/run/docker.sock"
STATE_DIR = Path(os.environ.get("RLKIT_STATE_DIR", Path(__file__).resolve().parents[2] / ".rlkit"))


def docker_socket_path() -> str:
    """Unix socket path from DOCKER_HOST (unix:// only), else the default one."""
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host.removeprefix("unix://")
    return DEFAULT_SOCKET


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def dockerd_answers(sock_path: str | None = None, timeout: float = 2.0) -> bool:
    """True when the Engine API answers `GET /_ping` with OK (no docker SDK import)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://") and sock_path is None:
        return _remote_ping(host, timeout)
    path = sock_path or docker_socket_path()
    if not os.path.exists(path):
        return False
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _remote_ping(host: str, timeout: float) -> bool:
    # tcp://host:port — let the SDK handle TLS and friends.
    try:
        import docker

        docker.DockerClient(base_url=host, timeout=int(max(timeout, 1))).ping()
        return True
    except Exception:  # noqa: BLE001 — any failure means "does not answer"
        return False


def ensure_dockerd(timeout: float = 60.0, log_path: Path | None = None, *, socket_path: str | None = None,
                   extra_args: tuple[str, ...] = ()) -> str:
    """Return the socket path of an answering dockerd, starting one when none answers.

    Starting needs root and the `dockerd` binary; otherwise a UserError says how to fix it.
    A daemon we start runs detached (its own session) and logs to .rlkit/dockerd.log.
    `socket_path`/`extra_args` run a separate daemon (own socket, data root...).
    """
    path = socket_path or docker_socket_path()
    if dockerd_answers(socket_path):
        return path
    if socket_path is None and os.environ.get("DOCKER_HOST", "").startswith(("tcp://", "ssh://")):
        raise SandboxError(f"docker daemon at {os.environ['DOCKER_HOST']} does not answer")
    binary = shutil.which("dockerd")
    if binary is None:
        raise UserError("dockerd is not installed", fix="apt-get install docker.io (or: bash scripts/setup.sh)")
    if os.geteuid() != 0:
        raise UserError("no docker daemon answers and only root can start one",
                        fix="start dockerd yourself (sudo dockerd &) or run as root")
    log_path = log_path or STATE_DIR / "dockerd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # A stale pid file from a killed daemon makes dockerd refuse to start.
    pid_file = Path("/var/run/docker.pid")
    if socket_path is None and pid_file.exists() and not _pid_alive(pid_file):
        pid_file.unlink(missing_ok=True)
    argv = [binary, *(["-H", f"unix://{socket_path}"] if socket_path else []), *extra_args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dockerd_answers(path):
            return path
        if proc.poll() is not None:
            # Another process may have won the race and started it first.
            if dockerd_answers(path):
                return path
            raise SandboxError(f"dockerd exited with code {proc.returncode}; see {log_path}",
                               log=str(log_path))
        time.sleep(0.2)
    raise SandboxError(f"dockerd did not answer within {timeout:.0f}s; see {log_path}", log=str(log_path))


def _pid_alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
        return True
    except (ValueError, OSError):
        return False
