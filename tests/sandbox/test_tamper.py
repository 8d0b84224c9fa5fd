"""The tamper check's judgement (pure, against a real image's probe output), its file readers,
and the change collectors (k8s against a fake API, docker against a real daemon)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkit.sandbox.tamper import (
    Change,
    ImageProfile,
    find_changes_script,
    from_docker_diff,
    from_find_output,
    judge,
    parse_probe,
    report,
    snapshot,
)
from rlkit.sandbox.tamper.files import HostRootReader

# What the probe printed in a task image FROM rlkit/base:bookworm (WORKDIR /app).
PROBE = Path(__file__).parent / "data" / "probe-bookworm-app.txt"
SITE = "/usr/local/lib/python3.11/dist-packages"
DIST = "/usr/lib/python3/dist-packages"
USER_SITE = "/root/.local/lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def profile() -> ImageProfile:
    return parse_probe(PROBE.read_text(), "sha256:probe")


class Files:
    """File contents a judgement may read (.pth, entry_points.txt, folders a .pth adds)."""

    def __init__(self, texts: dict[str, str] | None = None, dirs: dict[str, list[str]] | None = None) -> None:
        self.texts, self.dirs = texts or {}, dirs or {}

    async def read_text(self, path: str) -> str | None:
        return self.texts.get(path)

    async def list_dir(self, path: str) -> list[str] | None:
        return self.dirs.get(path)


def _judge(profile: ImageProfile, changes: list[tuple[str, str]], files: Files | None = None):
    return asyncio.run(judge([Change(p, k) for k, p in changes], profile, files or Files(), "/app"))


def _rules(profile: ImageProfile, changes: list[tuple[str, str]], files: Files | None = None) -> dict[str, str]:
    return {f.path: f.rule for f in _judge(profile, changes, files).findings}


def test_the_probe_describes_the_image_as_the_verifier_sees_it(profile: ImageProfile):
    assert profile.workdir == "/app"
    assert profile.path_dirs == ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"]  # /bin -> usr/bin once
    assert profile.tools["bash"] == "/usr/bin/bash" and profile.tools["chmod"] == "/usr/bin/chmod"
    assert profile.links["/bin"] == "usr/bin" and profile.links["/usr/bin/python3"] == "python3.11"
    [python] = profile.interpreters
    assert python.exe == "/usr/bin/python3.11" and set(python.commands) == {"/usr/bin/python3", "/usr/bin/python3.11"}
    assert python.sys_path == ["/usr/lib/python311.zip", "/usr/lib/python3.11", "/usr/lib/python3.11/lib-dynload",
                               SITE, DIST]
    assert python.user_site == ".local/lib/python3.11/site-packages" and python.pytest_plugins == []
    assert {"pytest", "_pytest", "pluggy", "iniconfig", "textwrap"} <= set(python.runner_modules)
    assert profile.entries[DIST]["_pytest"] == "p" and "/usr/lib/x86_64-linux-gnu" in profile.lib_dirs
    assert profile.grading_env() == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                     "HOME": "/root", "PYTHONNOUSERSITE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_changes_that_steer_the_tests_are_flagged_by_what_they_do(profile: ImageProfile):
    files = Files(texts={f"{SITE}/zz-steer.pth": "import os; os.system('x')\n", f"{SITE}/zz-path.pth": "/opt/zz\n"},
                  dirs={"/opt/zz": ["iniconfig.py"]})
    found = _rules(profile, [
        # modules that come earlier than the image's on an import path: a package, sourceless bytecode,
        # an extension, in the user site, beside the grader's working dir or console scripts
        ("A", f"{SITE}/iniconfig/__init__.py"), ("A", f"{SITE}/pluggy.pyc"),
        ("A", f"{SITE}/attr.cpython-311-x86_64-linux-gnu.so"), ("A", f"{USER_SITE}/packaging/__init__.py"),
        ("A", "/app/iniconfig.py"), ("A", "/app/code.py"), ("A", "/usr/bin/_pytest/__init__.py"),
        # start-up code in any form; .pth files by their content
        ("A", f"{USER_SITE}/usercustomize/__init__.py"), ("A", f"{SITE}/sitecustomize.pyc"),
        ("A", f"{SITE}/zz-steer.pth"), ("A", f"{SITE}/zz-path.pth"), ("C", "/etc/python3.11/sitecustomize.py"),
        # the interpreter, its stdlib and the test runner
        ("C", "/usr/lib/python3.11/textwrap.py"), ("D", f"{DIST}/_pytest/runner.py"), ("A", f"{DIST}/_pytest/zz.py"),
        ("A", "/usr/bin/python3.11._pth"), ("A", "/usr/pyvenv.cfg"), ("C", "/usr/bin/python3"),
        # commands: shadowing, edited, the verifier's own tools; libraries and the loader
        ("A", "/usr/local/bin/chmod"), ("A", "/usr/local/sbin/python3"), ("C", "/usr/bin/timeout"),
        ("C", "/usr/bin/tar"), ("C", "/etc/alternatives/awk"), ("C", "/bin"),
        ("A", "/usr/local/lib/libc.so.6"), ("C", "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4"),
        ("A", "/etc/ld.so.preload"), ("A", "/etc/ld.so.conf.d/zz.conf"),
        # pytest configuration above the tests and in the working dir
        ("A", "/conftest.py"), ("A", "/app/pytest.ini"), ("A", "/pyproject.toml"),
    ], files)
    assert found == {
        f"{SITE}/iniconfig/__init__.py": "shadow_module", f"{SITE}/pluggy.pyc": "shadow_module",
        f"{SITE}/attr.cpython-311-x86_64-linux-gnu.so": "shadow_module",
        f"{USER_SITE}/packaging/__init__.py": "shadow_module", "/app/iniconfig.py": "shadow_module",
        "/app/code.py": "shadow_module", "/usr/bin/_pytest/__init__.py": "shadow_module",
        f"{USER_SITE}/usercustomize/__init__.py": "startup_hook", f"{SITE}/sitecustomize.pyc": "startup_hook",
        f"{SITE}/zz-steer.pth": "pth_code", f"{SITE}/zz-path.pth": "pth_shadow",
        "/etc/python3.11/sitecustomize.py": "link_target_edit",
        "/usr/lib/python3.11/textwrap.py": "interpreter_edit", f"{DIST}/_pytest/runner.py": "interpreter_edit",
        f"{DIST}/_pytest/zz.py": "package_edit", "/usr/bin/python3.11._pth": "interpreter_config",
        "/usr/pyvenv.cfg": "interpreter_config", "/usr/bin/python3": "redirect",
        "/usr/local/bin/chmod": "command_shadow", "/usr/local/sbin/python3": "command_shadow",
        "/usr/bin/timeout": "command_edit", "/usr/bin/tar": "verifier_tool", "/etc/alternatives/awk": "redirect",
        "/bin": "redirect", "/usr/local/lib/libc.so.6": "library_shadow",
        "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4": "library_edit", "/etc/ld.so.preload": "library_preload",
        "/etc/ld.so.conf.d/zz.conf": "library_path",
        "/conftest.py": "pytest_config", "/app/pytest.ini": "pytest_config", "/pyproject.toml": "pytest_config",
    }


def test_legitimate_changes_are_not_flagged(profile: ImageProfile):
    files = Files(texts={f"{SITE}/__editable__.tools.pth": "/opt/tools\n",
                         f"{SITE}/logcount-1.0.dist-info/entry_points.txt": "[console_scripts]\nlogcount = logcount:main\n"},
                  dirs={"/opt/tools": ["logtools.py", "__pycache__"]})
    verdict = _judge(profile, [
        # the solution, the agent's own project files and scratch
        ("C", "/app"), ("C", "/app/logs"), ("A", "/app/error_count.txt"), ("A", "/app/test.py"),
        ("A", "/app/helpers.py"), ("A", "/app/sub/conftest.py"), ("A", "/app/pyproject.toml"), ("A", "/tmp/x"),
        # a package the task needs (pip: its files, metadata, console script, bytecode), a path .pth
        ("A", f"{SITE}/logcount/__init__.py"), ("A", f"{SITE}/logcount/__pycache__/__init__.cpython-311.pyc"),
        ("A", f"{SITE}/logcount-1.0.dist-info/entry_points.txt"), ("A", "/usr/local/bin/logcount"),
        ("A", f"{USER_SITE}/requests/__init__.py"), ("A", f"{SITE}/__editable__.tools.pth"),
        # new commands that shadow nothing; a venv with its own code-running .pth
        ("A", "/usr/local/bin/count-errors"), ("A", "/usr/bin/jq"),
        ("A", "/opt/venv/lib/python3.11/site-packages/distutils-precedence.pth"), ("A", "/opt/venv/bin/python3"),
        # a namespace portion that shadows nothing, files of rlkit's agents, apt's loader cache
        ("A", f"{SITE}/share/doc/x.txt"), ("A", "/opt/rlkit-agents/cc/claude"), ("C", "/etc/ld.so.cache"),
        ("A", "/root/.bash_history"), ("C", "/etc/passwd"),
    ], files)
    assert verdict.findings == [] and verdict.notes == []
    assert verdict.remove == [f"{SITE}/logcount/__pycache__/__init__.cpython-311.pyc"]
    assert verdict.rebuild_loader_cache


def test_bytecode_caches_under_the_interpreters_are_removed_before_the_tests(profile: ImageProfile):
    forged = f"{DIST}/iniconfig/__pycache__/__init__.cpython-311.pyc"
    verdict = _judge(profile, [("C", forged), ("A", "/usr/lib/python3.11/__pycache__/zz.cpython-311.pyc"),
                               ("D", "/usr/lib/python3.11/__pycache__/json.cpython-311.pyc"),
                               ("A", "/app/__pycache__/helpers.cpython-311.pyc")])
    assert verdict.findings == []
    assert verdict.remove == [forged, "/usr/lib/python3.11/__pycache__/zz.cpython-311.pyc"]


def test_a_pytest_plugin_entry_point_is_flagged_only_where_it_would_load(profile: ImageProfile):
    plugin = f"{SITE}/zz-1.0.dist-info/entry_points.txt"
    files = Files(texts={plugin: "[pytest11]\nzz = zz_grader\n"})
    verdict = _judge(profile, [("A", plugin)], files)
    assert verdict.findings == [] and [n.rule for n in verdict.notes] == ["inert"]  # PYTEST_DISABLE_PLUGIN_AUTOLOAD
    with_plugins = profile.model_copy(deep=True)
    with_plugins.interpreters[0].pytest_plugins = ["ctrf = pytest_ctrf.plugin"]
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in with_plugins.grading_env()
    assert _rules(with_plugins, [("A", plugin)], files) == {plugin: "pytest_plugin"}


def test_a_project_on_pythonpath_stays_the_agents_work(profile: ImageProfile):
    """ENV PYTHONPATH=/app puts the working dir on every import path: editing the project or
    adding scratch modules there is the agent's work; shadowing what the grader loads is not."""
    on_path = profile.model_copy(deep=True)
    on_path.interpreters[0].sys_path.insert(0, "/app")
    on_path.entries["/app"] = {"logs": "d", "spans": "p"}
    assert _rules(on_path, [("C", "/app/spans/merge.py"), ("A", "/app/spans/new.py"), ("A", "/app/test.py"),
                            ("D", "/app/logs/app.log"), ("A", "/app/iniconfig.py"), ("A", "/app/sitecustomize.py"),
                            ("A", "/app/pluggy/__init__.py")]) == {
        "/app/iniconfig.py": "shadow_module", "/app/sitecustomize.py": "startup_hook",
        "/app/pluggy/__init__.py": "shadow_module"}


def test_find_kinds_are_told_apart_with_the_images_own_listing(profile: ImageProfile):
    # k8s: find cannot tell new from changed; the image's listing can
    assert _rules(profile, [("?", "/usr/bin/tar"), ("?", "/usr/local/bin/jq"), ("?", "/usr/local/bin/chmod"),
                            ("?", f"{SITE}/requests/__init__.py"), ("?", "/usr/lib/python3.11/json/__init__.py")]) == {
        "/usr/bin/tar": "verifier_tool", "/usr/local/bin/chmod": "command_shadow",
        "/usr/lib/python3.11/json/__init__.py": "interpreter_edit"}


def test_host_reader_never_leaves_the_container_root(tmp_path: Path):
    root = tmp_path / "merged"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "x.pth").write_text("/opt/zz\n")
    (root / "site").mkdir()
    os.symlink("/etc/x.pth", root / "site" / "abs.pth")          # absolute: inside the container's root
    os.symlink("../../../../../../etc/hostname", root / "site" / "up.pth")  # .. stops at the root
    os.symlink("/site/loop", root / "site" / "loop")
    os.mkfifo(root / "site" / "fifo.pth")
    reader = HostRootReader(str(root))
    assert asyncio.run(reader.read_text("/site/abs.pth")) == "/opt/zz\n"
    assert asyncio.run(reader.read_text("/site/up.pth")) is None  # the root's /etc/hostname, absent here
    assert asyncio.run(reader.read_text("/site/loop")) is None
    assert asyncio.run(reader.read_text("/site/fifo.pth")) is None  # never blocks on a FIFO
    assert sorted(asyncio.run(reader.list_dir("/site"))) == ["abs.pth", "fifo.pth", "loop", "up.pth"]


def test_report_keeps_the_verdict_and_the_changes(profile: ImageProfile):
    changes = from_docker_diff([{"Path": "/conftest.py", "Kind": 1}, {"Path": "/etc/passwd", "Kind": 0},
                                {"Path": "/usr/bin/zip", "Kind": 2}])
    assert changes == [Change("/conftest.py", "A"), Change("/etc/passwd", "C"), Change("/usr/bin/zip", "D")]
    verdict = asyncio.run(judge(changes, profile, Files(), "/app"))
    doc = report(changes, verdict, "/app", "docker-diff", profile.key)
    assert doc["suspect"] and doc["image"] == "sha256:probe"
    assert doc["changes"] == ["A /conftest.py", "C /etc/passwd", "D /usr/bin/zip"]
    assert [(f["path"], f["rule"]) for f in doc["findings"]] == [("/conftest.py", "pytest_config")]


def test_find_output_kinds_are_unknown():
    workdir, changes = from_find_output("/app\n/\n/app\n/app/x.py\n/usr/lib/python3.11/os.py\n/app/x.py\n")
    assert workdir == "/app"
    assert changes == [Change("/app", "?"), Change("/app/x.py", "?"), Change("/usr/lib/python3.11/os.py", "?")]


class _FakeK8sEnv:
    """Just what `snapshot` reads of a KubernetesEnvironment; exec answers a canned find run."""

    def __init__(self, started: dt.datetime | None, profile: ImageProfile | None = None) -> None:
        self.pod_name, self.opts, self.image_profile = "pod-1", SimpleNamespace(namespace="ns"), profile
        running = SimpleNamespace(started_at=started) if started else None
        status = SimpleNamespace(container_statuses=[SimpleNamespace(state=SimpleNamespace(running=running))])
        self.core_api = SimpleNamespace(read_namespaced_pod=lambda name, namespace: SimpleNamespace(status=status))
        self.commands: list[str] = []

    @staticmethod
    def type() -> str:
        return "rlkit-k8s"

    async def exec(self, command: str, user: str | None = None, timeout_sec: int | None = None, **_kw):
        self.commands.append(command)
        return SimpleNamespace(stdout="/app\n/app/pytest.py\n/etc/hosts\n", stderr=None, return_code=0)


@pytest.mark.fake_k8s
def test_k8s_snapshot_finds_changes_since_the_container_started(profile: ImageProfile):
    started = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    env = _FakeK8sEnv(started, profile)
    snap = asyncio.run(snapshot(env))
    assert snap is not None and snap.source == "k8s-find" and snap.workdir == "/app"
    # the image's own find and head, by absolute path
    assert env.commands == [find_changes_script(int(started.timestamp()) - 1, "/usr/bin/find", "/usr/bin/head")]
    assert f"/usr/bin/find / \"$wd\" -xdev -newerct @{int(started.timestamp()) - 1}" in env.commands[0]
    verdict = asyncio.run(judge(snap.changes, profile, snap.files, snap.workdir))
    assert [(f.path, f.rule) for f in verdict.findings] == [("/app/pytest.py", "shadow_module")]
    env = _FakeK8sEnv(None)  # no start time known: the pod's /etc/hostname is the reference
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
            pytest.fail("the daemon's storage is not overlay2 on this host")
        expected = from_docker_diff(api.diff(container))
        assert sorted(changes, key=lambda c: c.path) == sorted(expected, key=lambda c: c.path)
        assert Change("/etc/motd", "D") in changes and Change("/conftest.py", "A") in changes
    finally:
        api.remove_container(container, force=True)


@pytest.mark.docker
def test_the_probe_of_a_real_image_is_cached_per_image(base_image, tmp_path: Path, monkeypatch):
    """A sandbox probes its image once; the profile comes from the cache afterwards (memory, then disk)."""
    from rlkit.sandbox.tamper import profile as profiles

    monkeypatch.setenv("RLKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(profiles, "_MEMORY", {})

    class Env:
        calls = 0

        async def exec(self, command: str, user: str | None = None, timeout_sec: int | None = None):
            Env.calls += 1
            proc = await asyncio.create_subprocess_exec(
                "docker", "run", "--rm", "--network", "none", "--label", "rlkit.test=tamper", base_image,
                "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            return SimpleNamespace(stdout=out.decode(), stderr=err.decode(), return_code=proc.returncode)

    first = asyncio.run(profiles.ensure_profile(Env(), "sha256:base-test"))
    assert first is not None and first.tools["bash"] == "/usr/bin/bash" and first.workdir == "/"
    monkeypatch.setattr(profiles, "_MEMORY", {})
    again = asyncio.run(profiles.ensure_profile(Env(), "sha256:base-test"))
    assert again == first and Env.calls == 1


@pytest.mark.docker
def test_archive_reader_reads_through_dockerd(base_image, docker_api):
    """The docker-diff path's reader (dockerd's archive endpoint): symlinks followed, folders listed."""
    from rlkit.sandbox.tamper.files import ArchiveReader

    container = docker_api.create_container(base_image, command=["sleep", "60"], labels={"rlkit.test": "tamper"},
                                            host_config=docker_api.create_host_config(network_mode="none"))
    try:
        docker_api.start(container)
        reader = ArchiveReader(docker_api, container["Id"])
        # a symlink to /etc/python3.11/sitecustomize.py in the image
        assert "apport" in asyncio.run(reader.read_text("/usr/lib/python3.11/sitecustomize.py"))
        assert {"_pytest", "pluggy", "iniconfig"} <= set(asyncio.run(reader.list_dir(DIST)))
        assert asyncio.run(reader.read_text("/nope")) is None and asyncio.run(reader.list_dir("/nope")) is None
    finally:
        docker_api.remove_container(container, force=True)
