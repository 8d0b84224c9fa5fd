"""The tamper check's rules (pure) and the k8s collector against a fake API."""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace

import pytest

from rlkit.sandbox.tamper import (
    Change,
    classify,
    find_changes_script,
    from_docker_diff,
    from_find_output,
    report,
    snapshot,
)


def _rules(changes: list[tuple[str, str]], workdir: str = "/app") -> dict[str, str]:
    return {f.path: f.rule for f in classify([Change(p, k) for k, p in changes], workdir)}


def test_verifier_steering_changes_are_flagged():
    found = _rules([
        ("A", "/conftest.py"), ("A", "/app/pytest.ini"), ("A", "/tox.ini"), ("A", "/pyproject.toml"),
        ("A", "/app/pytest.py"), ("A", "/app/_pytest"), ("A", "/app/_pytest/__init__.py"),
        ("A", "/usr/lib/python3/dist-packages/zz.pth"), ("A", "/usr/lib/python3.11/sitecustomize.py"),
        ("C", "/usr/lib/python3.11/json/__init__.py"), ("D", "/usr/lib/python3/dist-packages/_pytest/runner.py"),
        ("C", "/usr/bin/timeout"), ("A", "/usr/local/bin/python3"),
    ])
    assert found == {
        "/conftest.py": "pytest_config", "/app/pytest.ini": "pytest_config", "/tox.ini": "pytest_config",
        "/pyproject.toml": "pytest_config", "/app/pytest.py": "shadow_module",
        "/app/_pytest/__init__.py": "shadow_module",
        "/usr/lib/python3/dist-packages/zz.pth": "pth_file", "/usr/lib/python3.11/sitecustomize.py": "startup_hook",
        "/usr/lib/python3.11/json/__init__.py": "interpreter_edit",
        "/usr/lib/python3/dist-packages/_pytest/runner.py": "interpreter_edit",
        "/usr/bin/timeout": "command_edit", "/usr/local/bin/python3": "command_edit",
    }


def test_honest_work_is_not_flagged():
    honest = [
        ("C", "/app"), ("C", "/app/spans/merge.py"), ("A", "/app/new_module.py"), ("A", "/app/pyproject.toml"),
        ("A", "/app/src/conftest.py"), ("A", "/app/sub/pytest.ini"), ("C", "/root"), ("A", "/root/.bash_history"),
        ("A", "/tmp/scratch.txt"), ("C", "/logs"), ("A", "/logs/agent/oracle.txt"),
        ("C", "/usr/lib/python3.11"), ("A", "/usr/lib/python3.11/__pycache__"),
        ("A", "/usr/lib/python3.11/__pycache__/json.cpython-311.pyc"),
        ("A", "/usr/local/lib/python3.11/dist-packages/requests/__init__.py"),
        ("A", "/usr/bin/jq"), ("A", "/opt/openhands-sdk-venv/lib/python3.12/site-packages/x.pth"),
    ]
    assert _rules(honest) == {}


def test_a_folder_listed_as_changed_only_because_of_its_children_is_not_an_edit():
    assert _rules([("C", "/usr/bin"), ("A", "/usr/bin/jq")]) == {}
    assert _rules([("C", "/usr/bin")]) == {}  # the folder itself (its mode or owner) steers nothing


def test_docker_diff_and_report():
    changes = from_docker_diff([{"Path": "/conftest.py", "Kind": 1}, {"Path": "/etc/passwd", "Kind": 0},
                                {"Path": "/usr/bin/zip", "Kind": 2}])
    assert changes == [Change("/conftest.py", "A"), Change("/etc/passwd", "C"), Change("/usr/bin/zip", "D")]
    findings = classify(changes, "/app")
    doc = report(changes, findings, "/app", "docker-diff")
    assert doc["suspect"] and doc["changes"] == ["A /conftest.py", "C /etc/passwd", "D /usr/bin/zip"]
    assert [f["rule"] for f in doc["findings"]] == ["pytest_config", "command_edit"]


def test_find_output_kinds_are_unknown_and_read_as_edits_where_it_matters():
    workdir, changes = from_find_output("/app\n/\n/app\n/app/x.py\n/usr/lib/python3.11/os.py\n"
                                        "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc\n/app/x.py\n")
    assert workdir == "/app"
    assert changes == [Change("/app", "?"), Change("/app/x.py", "?"), Change("/usr/lib/python3.11/os.py", "?"),
                       Change("/usr/lib/python3.11/__pycache__/os.cpython-311.pyc", "?")]
    assert _rules([(c.kind, c.path) for c in changes]) == {"/usr/lib/python3.11/os.py": "interpreter_edit"}


class _FakeK8sEnv:
    """Just what `snapshot` reads of a KubernetesEnvironment; exec answers a canned find run."""

    def __init__(self, started: dt.datetime | None) -> None:
        self.pod_name, self.opts = "pod-1", SimpleNamespace(namespace="ns")
        running = SimpleNamespace(started_at=started) if started else None
        status = SimpleNamespace(container_statuses=[SimpleNamespace(state=SimpleNamespace(running=running))])
        self.core_api = SimpleNamespace(read_namespaced_pod=lambda name, namespace: SimpleNamespace(status=status))
        self.commands: list[str] = []

    @staticmethod
    def type() -> str:
        return "rlkit-k8s"

    async def exec(self, command: str, user: str | None = None, timeout_sec: int | None = None):
        self.commands.append(command)
        return SimpleNamespace(stdout="/work\n/work/pytest.py\n/etc/hosts\n", stderr=None, return_code=0)


@pytest.mark.fake_k8s
def test_k8s_snapshot_finds_changes_since_the_container_started():
    started = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    env = _FakeK8sEnv(started)
    snap = asyncio.run(snapshot(env))
    assert snap is not None and snap.source == "k8s-find" and snap.workdir == "/work"
    assert env.commands == [find_changes_script(int(started.timestamp()) - 1)]
    assert f"-newerct @{int(started.timestamp()) - 1}" in env.commands[0]
    assert [f.rule for f in classify(snap.changes, snap.workdir)] == ["shadow_module"]
    # no start time known: the pod's /etc/hostname is the reference
    env = _FakeK8sEnv(None)
    asyncio.run(snapshot(env))
    assert "-cnewer /etc/hostname" in env.commands[0]


def test_a_foreign_backend_is_not_checked():
    assert asyncio.run(snapshot(SimpleNamespace(type=lambda: "user-backend"))) is None


@pytest.mark.docker
def test_overlay_upper_layer_gives_what_docker_diff_gives(base_image):
    """The fast path reads the container's upper layer; the Engine's own diff is the reference."""
    import time

    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.tamper import overlay_changes

    api = api_client()
    script = ("mkdir -p /app && echo x > /app/new && echo y >> /etc/hostname.bak; rm -f /etc/motd /etc/issue; "
              "touch /usr/bin/zz /conftest.py; mkdir -p /usr/lib/python3/dist-packages/d && touch "
              "/usr/lib/python3/dist-packages/d/a.pth; echo done; sleep 60")
    container = api.create_container(base_image, command=["bash", "-c", script], labels={"rlkit.test": "tamper"},
                                     host_config=api.create_host_config(network_mode="none"))
    try:
        api.start(container)
        for _ in range(100):
            if b"done" in api.logs(container):
                break
            time.sleep(0.1)
        changes = overlay_changes(api.inspect_container(container)["GraphDriver"])
        if changes is None:
            pytest.skip("the daemon's storage is not overlay2 on this host")
        expected = from_docker_diff(api.diff(container))
        assert sorted(changes, key=lambda c: c.path) == sorted(expected, key=lambda c: c.path)
        assert Change("/etc/motd", "D") in changes and Change("/conftest.py", "A") in changes
    finally:
        api.remove_container(container, force=True)
