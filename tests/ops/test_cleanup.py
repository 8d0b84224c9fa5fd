"""`rlkit cleanup`: labelled sandboxes left by a killed process are found and removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.ops._bystander import bystander_while_the_module_runs
from tests.sandbox._helpers import write_task

ROOT = Path(__file__).resolve().parents[2]
# Another project's crashed run sits beside every test here; the module fails if any of it goes.
pytestmark = pytest.mark.usefixtures("bystander_while_the_module_runs")
__all__ = ["bystander_while_the_module_runs"]  # the fixture


def _rlkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)


def _labelled(docker_api, project: str) -> list[dict]:
    return docker_api.containers(all=True, filters={"label": f"rlkit.project={project}"})


@pytest.mark.docker
def test_cleanup_after_kill_9_of_a_process_with_8_sandboxes(tmp_path: Path, base_image: str, docker_api) -> None:
    project = f"crash-{uuid.uuid4().hex[:8]}"
    task = write_task(tmp_path, "rlkit-test-calc")
    proc = subprocess.Popen([sys.executable, "-m", "tests.ops._start_sandboxes", str(task), str(tmp_path),
                             project, "8"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.poll() is not None else line
        assert len(_labelled(docker_api, project)) == 8
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    except BaseException:
        from rlkit.ops.cleanup import cleanup

        cleanup(project=project, k8s=False)  # don't leave this test's sandboxes behind on failure
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The containers outlive their owner: only the labels can find them now.
    assert len(_labelled(docker_api, project)) == 8

    dry = _rlkit("cleanup", "--project", project, "--sandboxes-only", "--dry-run")
    assert dry.stdout.count("would remove container") == 8 and len(_labelled(docker_api, project)) == 8

    first = _rlkit("cleanup", "--project", project, "--sandboxes-only")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("removed container") == 8
    assert f"project={project}" in first.stdout
    assert _labelled(docker_api, project) == []

    second = _rlkit("cleanup", "--project", project, "--sandboxes-only")
    assert second.returncode == 0
    assert second.stdout.strip() == "nothing to clean"


@pytest.mark.docker
def test_cleanup_only_touches_the_selected_project(tmp_path: Path, base_image: str, docker_api) -> None:
    from rlkit.ops.cleanup import cleanup
    from rlkit.sandbox import labels as L

    keep, drop = f"keep-{uuid.uuid4().hex[:6]}", f"drop-{uuid.uuid4().hex[:6]}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ids = []
    for project in (keep, drop):  # both orphans of this uid: only the selected project's goes
        created = docker_api.create_container(base_image, command=["sleep", "60"], labels={
            L.MANAGED: "1", L.PROJECT: project, L.OWNER_UID: str(os.getuid()), L.OWNER_PID: str(dead.pid)})
        ids.append(created["Id"])
    unlabelled = docker_api.create_container(base_image, command=["sleep", "60"])["Id"]
    try:
        report = cleanup(project=drop, k8s=False)
        assert [r.kind for r in report.removed] == ["container"]
        assert len(_labelled(docker_api, keep)) == 1 and _labelled(docker_api, drop) == []
        assert docker_api.containers(all=True, filters={"id": unlabelled})
    finally:
        for cid in (ids[0], unlabelled):
            docker_api.remove_container(cid, force=True)


@pytest.mark.docker
def test_a_sandbox_without_owner_labels_is_reported_until_its_run_is_named(tmp_path: Path, base_image: str,
                                                                          docker_api) -> None:
    """Made by hand (or before owner labels): no uid says whose it is, so only naming its run removes it."""
    project = f"bare-{uuid.uuid4().hex[:6]}"
    bare = docker_api.create_container(base_image, command=["sleep", "60"], labels={
        "rlkit.managed": "1", "rlkit.project": project, "rlkit.experiment": "by-hand"})["Id"]
    try:
        listed = _rlkit("cleanup", "--project", project, "--sandboxes-only")
        assert listed.returncode == 0 and "no owner uid recorded" in listed.stdout, listed.stdout
        assert "--experiment NAME removes it" in listed.stdout and _labelled(docker_api, project)
        named = _rlkit("cleanup", "--project", project, "--experiment", "by-hand", "--sandboxes-only")
        assert named.returncode == 0 and "removed container" in named.stdout, named.stdout
        assert _labelled(docker_api, project) == []
    finally:
        if docker_api.containers(all=True, filters={"id": bare}):
            docker_api.remove_container(bare, force=True)


@pytest.mark.docker
def test_user_and_logname_never_make_another_uids_sandbox_yours(tmp_path: Path, base_image: str, docker_api) -> None:
    """$USER / $LOGNAME set to the other user's name: cleanup still sees whose sandbox it is by uid."""
    from rlkit.sandbox import labels as L

    project = f"uid-{uuid.uuid4().hex[:6]}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    theirs = docker_api.create_container(base_image, command=["sleep", "60"], labels={
        L.MANAGED: "1", L.PROJECT: project, L.OWNER_UID: str(os.getuid() + 1), L.OWNER_USER: "mallory",
        L.OWNER_PID: str(dead.pid)})["Id"]
    try:
        env = {**os.environ, "USER": "mallory", "LOGNAME": "mallory"}
        done = subprocess.run([sys.executable, "-m", "rlkit", "cleanup", "--project", project, "--sandboxes-only"],
                              cwd=ROOT, capture_output=True, text=True, check=False, env=env)
        assert done.returncode == 0 and "removed" not in done.stdout, done.stdout
        assert f"owned by uid {os.getuid() + 1} (mallory)" in done.stdout
        assert docker_api.containers(all=True, filters={"id": theirs})
    finally:
        docker_api.remove_container(theirs, force=True)


def _listener(port_file: Path, argv0: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    code = (f"import socket, sys\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            f"open({str(port_file)!r}, 'w').write(str(s.getsockname()[1]))\nimport time; time.sleep(600)\n")
    # argv carries the marker, as `rlkit proxy serve` would
    return subprocess.Popen([sys.executable, "-c", code, *argv0.split()], env={**os.environ, **(env or {})})


def _wait_port(port_file: Path) -> int:
    import time

    for _ in range(200):
        if port_file.exists() and port_file.read_text():
            return int(port_file.read_text())
        time.sleep(0.05)
    raise AssertionError("listener did not start")


def test_process_cleanup_stops_only_orphans_of_dead_owners(tmp_path: Path) -> None:
    from rlkit.config.owner import OWNER_PID_ENV, OWNER_PROJECT_ENV, OWNER_START_ENV
    from rlkit.ops import procs
    from rlkit.ops.cleanup import CleanupReport, check_ports, clean_processes

    project = f"procs-{uuid.uuid4().hex[:6]}"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = _listener(tmp_path / "orphan", "rlkit proxy serve", {OWNER_PID_ENV: str(dead.pid), OWNER_START_ENV: "1",
                                                                  OWNER_PROJECT_ENV: project})
    live = _listener(tmp_path / "live", "rlkit proxy serve", {OWNER_PID_ENV: str(os.getpid()), OWNER_START_ENV: "",
                                                              OWNER_PROJECT_ENV: project})
    elsewhere = _listener(tmp_path / "elsewhere", "rlkit proxy serve", {  # another project's orphan: out of scope
        OWNER_PID_ENV: str(dead.pid), OWNER_START_ENV: "1", OWNER_PROJECT_ENV: f"{project}-other"})
    theirs = _listener(tmp_path / "theirs", "somebody else")
    try:
        ports = [_wait_port(tmp_path / n) for n in ("orphan", "live", "theirs", "elsewhere")]
        judged = {p.pid: p for p in procs.scan([tmp_path], project)}
        assert judged[orphan.pid].orphan and "is gone" in judged[orphan.pid].why
        assert not judged[live.pid].orphan and theirs.pid not in judged and elsewhere.pid not in judged
        assert procs.scan([tmp_path], f"{project}-other")  # its own project's scan sees it

        dry = CleanupReport(dry_run=True)
        clean_processes(dry, [tmp_path], project)
        assert orphan.poll() is None and [r.name for r in dry.removed] == [str(orphan.pid)]

        report = CleanupReport()
        clean_processes(report, [tmp_path], project)
        check_ports(report, ports[:3])
        assert [r.name for r in report.removed] == [str(orphan.pid)]
        assert {str(live.pid), str(theirs.pid)}.isdisjoint(r.name for r in report.removed)
        orphan.wait(timeout=10)  # stopped (psutil reaped it, so its exit status reads 0 here)
        assert live.poll() is None and theirs.poll() is None and elsewhere.poll() is None
        assert any(f"port {ports[2]}" in w and "not rlkit's" in w for w in report.warnings)
    finally:
        for proc in (orphan, live, theirs, elsewhere):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cleanup_without_a_daemon_or_cluster_is_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.ops import cleanup as mod

    monkeypatch.setattr("rlkit.sandbox.dockerd.dockerd_answers", lambda *a, **k: False)
    lines: list[str] = []
    report = mod.cleanup(f"none-{uuid.uuid4().hex[:6]}", k8s=False, log=lines.append)
    assert report.nothing_done and lines == ["nothing to clean"]


def test_unreachable_cluster_is_a_warning_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.ops import cleanup as mod

    def unreachable(*_a, **_k):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(mod, "clean_k8s", unreachable)
    monkeypatch.setattr("rlkit.sandbox.dockerd.dockerd_answers", lambda *a, **k: False)
    lines: list[str] = []
    report = mod.cleanup(f"none-{uuid.uuid4().hex[:6]}", k8s=True, log=lines.append)
    assert report.errors == [] and "connection refused" in report.warnings[0]
    assert lines[0].startswith("⚠ kubernetes not cleaned")
