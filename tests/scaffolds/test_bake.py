"""Agent baking: image names, the per-task layer, and (with docker) the baked agents'
versions as harbor's install checks see them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rlkit.scaffolds import get_scaffold
from rlkit.scaffolds.bake import build_scaffold_image, scaffold_image_ref, scaffold_layer_dockerfile
from rlkit.scaffolds.cc import CLAUDE_CODE_VERSION
from rlkit.scaffolds.oc import OPENCODE_VERSION
from rlkit.scaffolds.ohsdk import OPENHANDS_SDK_VERSION


def test_scaffold_image_names_agree_with_task_image_naming() -> None:
    from rlkit.tasks.images import task_image_ref

    for registry in (None, "registry.local:5000/team"):
        plain = task_image_ref("calc", registry)
        assert scaffold_image_ref(plain, "cc") == task_image_ref("calc", registry, variant="cc")
    assert scaffold_image_ref("ghcr.io/org/env:1.2", "oc") == "ghcr.io/org/env:1.2-oc"
    assert scaffold_image_ref("env", "ohsdk") == "env:ohsdk"


def test_layer_copies_the_agent_and_puts_it_on_path() -> None:
    """AGENT_DELIVERY=bake: the agent's one tree and the links a mounted agent gets at sandbox start."""
    from rlkit.scaffolds.bake import AGENT_LAYOUT, agent_links

    dockerfile = scaffold_layer_dockerfile("rlkit-task/calc:latest", get_scaffold("cc"))
    assert dockerfile.startswith("FROM rlkit-task/calc:latest\n")
    agent = f"rlkit/agent-cc:{CLAUDE_CODE_VERSION}-{AGENT_LAYOUT}"
    assert f"COPY --from={agent} /opt/rlkit-agents/cc /opt/rlkit-agents/cc" in dockerfile
    assert "ln -sfn /opt/rlkit-agents/cc/claude /usr/local/bin/claude" in dockerfile
    ohsdk = scaffold_layer_dockerfile("rlkit-task/calc:latest", get_scaffold("ohsdk"))
    assert ohsdk.count("COPY") == 1 and "ldconfig" not in ohsdk  # the interpreter finds libpython by $ORIGIN
    assert "ln -sfn /opt/rlkit-agents/ohsdk/venv /opt/openhands-sdk-venv" in ohsdk
    assert agent_links(get_scaffold("ohsdk")) == {"/opt/openhands-sdk-venv": "/opt/rlkit-agents/ohsdk/venv"}


def test_the_copied_interpreter_finds_libpython_beside_itself(tmp_path: Path) -> None:
    """The host prefix's lib/ in the interpreter's RUNPATH becomes $ORIGIN/../lib, in place (same length),
    so the agent's tree runs wherever it is mounted, with no loader configuration in the sandbox."""
    from rlkit.scaffolds.bake import relocate_runpath

    old = "/root/.pyenv/versions/3.12.1/lib"
    binary = tmp_path / "python3.12"
    before = b"\x7fELF...\0libpython3.12.so.1.0\0" + old.encode() + b"\0libc.so.6\0"
    binary.write_bytes(before)
    assert relocate_runpath(binary, old)
    after = binary.read_bytes()
    assert len(after) == len(before) and b"\0$ORIGIN/../lib\0" in after and old.encode() not in after
    assert after.endswith(b"\0libc.so.6\0")
    assert not relocate_runpath(binary, old)  # nothing left to point elsewhere


def test_a_new_agent_version_is_a_new_image_and_a_new_volume() -> None:
    from rlkit.sandbox.agent_volume import volume_name
    from rlkit.scaffolds.bake import agent_mount

    mount = agent_mount(get_scaffold("oc"))
    assert mount.image.startswith(f"rlkit/agent-oc:{OPENCODE_VERSION}-")
    first, rebuilt = volume_name(mount, "sha256:" + "a" * 64), volume_name(mount, "sha256:" + "b" * 64)
    assert first != rebuilt and first.startswith(f"rlkit-agent-oc-{OPENCODE_VERSION}-")
    repinned = mount.model_copy(update={"image": "rlkit/agent-oc:9.9.9-m1"})
    assert volume_name(repinned, "sha256:" + "a" * 64) != first


def test_trials_mount_the_agent_by_default_and_bake_on_request() -> None:
    for name in ("cc", "oc", "ohsdk"):
        mounted = get_scaffold(name).environment_kwargs("docker")
        assert mounted["image_variant"] == "latest" and mounted["agent_mount"]["target"] == f"/opt/rlkit-agents/{name}"
        baked = get_scaffold(name).environment_kwargs("docker", "bake")
        assert baked["image_variant"] == name and "agent_mount" not in baked
    assert "agent_mount" not in get_scaffold("terminus").environment_kwargs("docker")


def test_the_ohsdk_build_imports_the_sdk_with_the_environment_its_trials_get() -> None:
    """The build's import check runs offline; without the trials' variables litellm's import spends 3 s
    retrying a price-list download."""
    from rlkit.scaffolds.bake import _dockerfile_ohsdk
    from rlkit.scaffolds.base import ScaffoldRun

    scaffold = get_scaffold("ohsdk")
    check = next(line for line in _dockerfile_ohsdk(scaffold).splitlines() if "import openhands.sdk" in line)
    prefix = check.split("bin/python -c", 1)[0]
    run = ScaffoldRun(session="s", model="policy")
    for key in ("LITELLM_LOCAL_MODEL_COST_MAP", "OPENHANDS_SUPPRESS_BANNER"):
        assert f"{key}={scaffold.agent_env(run)[key]}" in prefix


def test_terminus_needs_no_layer() -> None:
    from rlkit.scaffolds.bake import scaffold_layer

    assert build_scaffold_image("rlkit-task/calc:latest", "terminus", log=lambda _m: None) == "rlkit-task/calc:latest"
    outcome = scaffold_layer("terminus")("rlkit-task/calc:latest", None)
    assert (outcome.image, outcome.status) == ("rlkit-task/calc:latest", "skipped")


def test_baking_stops_before_a_layer_would_fill_dockers_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit test, docker stood in: every task's ohsdk layer stores the agent again (0.57 GiB), so baking a
    large index can fill docker's disk, which breaks dockerd and every sandbox beside it. The hook says once
    how many layers fit, builds while there is room and then refuses, naming the sizes, the disk and the fix;
    a layer that is already current costs nothing and is never refused."""
    from rlkit.scaffolds import bake

    gb = bake.GB
    free = [bake.DISK_RESERVE_BYTES + int(1.5 * gb)]  # room for two 0.62 GB layers
    built: list[str] = []

    def fake_build(task_image: str, name: str, **_: object) -> str:
        built.append(task_image)
        free[0] -= int(0.62 * gb)
        return scaffold_image_ref(task_image, name)

    monkeypatch.setattr(bake, "build_agent_image", lambda name, **_: f"rlkit/agent-{name}:v")
    monkeypatch.setattr(bake, "agent_payload_bytes", lambda api, scaffold: int(0.62 * gb))
    monkeypatch.setattr(bake, "docker_free_bytes", lambda api: ("/var/lib/docker", free[0]))
    monkeypatch.setattr(bake, "layer_is_current", lambda ref, task, scaffold: task.endswith("/current:latest"))
    monkeypatch.setattr(bake, "build_scaffold_image", fake_build)
    monkeypatch.setattr("rlkit.sandbox.docker_api.api_client", lambda **_: object())
    logs: list[str] = []
    layer = bake.scaffold_layer("ohsdk", log=logs.append)
    outcomes = [layer(f"rlkit-task/t{i}:latest", None) for i in range(3)] + [layer("rlkit-task/current:latest", None)]
    assert [o.status for o in outcomes] == ["built", "built", "failed", "cached"]
    assert built == ["rlkit-task/t0:latest", "rlkit-task/t1:latest", "rlkit-task/current:latest"]
    assert logs == ["… each ohsdk layer stores 0.62 GiB in /var/lib/docker (3.5 GiB free: room for ~2 layers)"]
    detail = outcomes[2].detail
    assert "each stores 0.62 GiB" in detail and "/var/lib/docker has 2.3 GiB free" in detail
    assert "docker image prune" in detail and "bake fewer tasks" in detail
    assert bake.disk_refusal("cc", int(0.4 * gb), "/d", bake.DISK_RESERVE_BYTES + int(0.4 * gb)) is None


@pytest.mark.docker
@pytest.mark.slow  # the first run bakes every agent image (npm, a site-packages, CPython 3.12)
def test_baked_agents_answer_harbors_version_checks(baked_images: dict[str, str], tmp_path) -> None:
    """The exact version command each agent class runs when its install is skipped."""
    from harbor.agents.factory import AgentFactory

    from rlkit.scaffolds import ScaffoldRun

    versions = {"cc": CLAUDE_CODE_VERSION, "oc": OPENCODE_VERSION, "ohsdk": OPENHANDS_SDK_VERSION}
    for name, version in versions.items():
        config = get_scaffold(name).agent_config(ScaffoldRun(session="s", model="tiny"))
        agent = AgentFactory.create_agent_from_config(config, logs_dir=tmp_path / name)
        out = subprocess.run(["docker", "run", "--rm", "--network", "none", baked_images[name], "bash", "-c",
                              agent.get_version_command()],
                             capture_output=True, text=True, check=False, timeout=120)
        assert out.returncode == 0, out.stderr
        assert agent.parse_version(out.stdout).startswith(version), (name, out.stdout)


@pytest.mark.docker
@pytest.mark.slow
def test_no_ohsdk_trial_compiles_what_harbors_runner_imports(baked_images: dict[str, str]) -> None:
    """The image holds the bytecode of every module the runner's imports load: importing them as a trial
    does, with bytecode writing on (task images may turn it off), writes no new .pyc (any loader's,
    beartype's own cache names included), so none was compiled."""
    from rlkit.scaffolds.bake import _OHSDK_RUNNER_IMPORTS
    from rlkit.scaffolds.ohsdk import OFFLINE_ENV, OHSDK_VENV

    program = ("import importlib, pathlib, sys\n"
               f"venv = pathlib.Path({OHSDK_VENV!r})\n"
               "before = set(venv.rglob('*.pyc'))\n"
               f"for name in {list(_OHSDK_RUNNER_IMPORTS)!r}: importlib.import_module(name)\n"
               "loaded = [m for m in list(sys.modules.values()) if str(getattr(m, '__file__', None)).startswith(str(venv))]\n"
               "print(len(loaded), sorted(str(p) for p in set(venv.rglob('*.pyc')) - before)[:20])\n")
    env = [arg for key, value in OFFLINE_ENV.items() for arg in ("-e", f"{key}={value}")]
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", *env, baked_images["ohsdk"],
                          "env", "-u", "PYTHONDONTWRITEBYTECODE", f"{OHSDK_VENV}/bin/python", "-c", program],
                         capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded, written = out.stdout.split(" ", 1)
    assert int(loaded) > 1000 and written.strip() == "[]", out.stdout


@pytest.mark.docker
@pytest.mark.slow  # waits on the agent images
def test_the_disk_guard_knows_what_each_agents_layer_stores(baked_images: dict[str, str], task_image: str) -> None:
    """The guard's estimate, read from the agent image before any layer exists, is what a task's layer adds
    on top of the task image, byte for byte but for the symlinks and ldconfig's cache."""
    from rlkit.sandbox.docker_api import api_client
    from rlkit.scaffolds.bake import agent_payload_bytes, docker_free_bytes

    api = api_client()
    task_size = api.inspect_image(task_image)["Size"]
    for name, ref in baked_images.items():
        added = api.inspect_image(ref)["Size"] - task_size
        estimate = agent_payload_bytes(api, get_scaffold(name))
        assert estimate is not None and 100 * 2**20 < estimate <= added < estimate + 64 * 2**10, (name, estimate, added)
    root, free = docker_free_bytes(api)
    assert Path(root).is_dir() and free > 0

    class RemoteDaemon:  # a daemon reached over tcp: its data root is another machine's folder
        base_url = "http://127.0.0.1:2375"

        def info(self) -> dict:
            return {"DockerRootDir": root}

    assert docker_free_bytes(RemoteDaemon()) is None


@pytest.mark.docker
@pytest.mark.slow
def test_a_changed_agent_image_re_layers_the_task_and_an_unchanged_one_does_not(
        baked_images: dict[str, str], task_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's scaffold layer is current only while it holds the agent image as it is now: a re-pinned or
    rebuilt agent (a new image id) layers every task again. Private tags, so no other test sees them."""
    import uuid

    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.images import image_id, inspect_labels
    from rlkit.scaffolds import bake

    api = api_client()
    tag = uuid.uuid4().hex[:10]
    agent, task = f"rlkit/agent-oc-{tag}:v", f"rlkit-task/bake-{tag}:latest"
    subprocess.run(["docker", "tag", bake.agent_image_ref(get_scaffold("oc")), agent], check=True)
    subprocess.run(["docker", "tag", task_image, task], check=True)
    monkeypatch.setattr(bake, "agent_image_ref", lambda scaffold: agent)
    logs: list[str] = []
    try:
        ref = build_scaffold_image(task, "oc", log=logs.append)
        assert logs[-1] == f"✓ built {ref}" and inspect_labels(api, ref)[bake.AGENT_LABEL] == image_id(api, agent)
        build_scaffold_image(task, "oc", log=logs.append)
        assert logs[-1] == f"✓ {ref} is up to date"
        rebuilt = subprocess.run(["docker", "build", "-q", "-t", agent, "--label", f"rebuilt={tag}", "-"],
                                 input=f"FROM {agent}\n", capture_output=True, text=True, check=False)
        assert rebuilt.returncode == 0, rebuilt.stderr
        build_scaffold_image(task, "oc", log=logs.append)
        assert logs[-1] == f"✓ built {ref}" and inspect_labels(api, ref)[bake.AGENT_LABEL] == image_id(api, agent)
    finally:
        subprocess.run(["docker", "rmi", "-f", agent, task, f"rlkit-task/bake-{tag}:oc"], capture_output=True,
                       check=False)


def test_ohsdk_bake_refuses_to_copy_a_distro_python(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from rlkit.errors import UserError
    from rlkit.scaffolds.bake import _host_python312

    monkeypatch.setattr(sys, "base_prefix", "/usr")
    with pytest.raises(UserError, match="not a self-contained install"):
        _host_python312()


def _build_in_child(log_path: str) -> None:
    from rlkit.scaffolds import bake

    lines: list[str] = []
    bake.build_agent_image("oc", log=lines.append)
    Path(log_path).write_text("\n".join(lines))


def test_two_processes_building_one_agent_take_turns_and_stage_it_once(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Two builds of one agent at once (test workers, a run beside `rlkit images`) must not
    npm-install into the same folder together: the second waits, then finds the image built."""
    import multiprocessing
    import time

    from rlkit.scaffolds import bake

    built, events = tmp_path / "built", tmp_path / "events"

    def stage(scaffold, stage_dir, log) -> None:  # the npm install's window, made wide
        with events.open("a") as f:
            f.write("start\n")
        time.sleep(0.5)
        with events.open("a") as f:
            f.write("end\n")

    monkeypatch.setattr(bake, "CACHE_DIR", tmp_path / "agents")
    # Every agent image is built FROM the base image, which is there.
    monkeypatch.setattr(bake, "image_exists", lambda ref: ref == bake.BASE_IMAGE or built.exists())
    monkeypatch.setattr(bake, "_stage_npm", stage)
    monkeypatch.setattr(bake, "_run", lambda cmd, **kw: built.touch() or "")
    ctx = multiprocessing.get_context("fork")  # the children keep these patches
    children = [ctx.Process(target=_build_in_child, args=(str(tmp_path / f"log{i}"),)) for i in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    assert events.read_text().split() == ["start", "end"]  # staged once, never two at a time
    logs = sorted((tmp_path / f"log{i}").read_text() for i in range(2))
    assert "up to date" in logs[-1] and "built" in logs[0], logs


def test_the_disk_guard_counts_a_mounted_agent_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit test, docker stood in: a mounted agent's volume is checked against docker's free space once,
    before it is filled; once it exists, no task (however many) is refused for it."""
    from rlkit.errors import UserError
    from rlkit.sandbox import agent_volume
    from rlkit.scaffolds import bake, mount

    gb = bake.GB
    volumes: list[dict] = []
    filled: list[str] = []

    class Api:
        def inspect_image(self, ref: str) -> dict:
            return {"Id": "sha256:" + "c" * 64}

    monkeypatch.setattr("rlkit.sandbox.docker_api.api_client", lambda **_: Api())
    monkeypatch.setattr(mount, "build_agent_image", lambda name, **_: f"rlkit/agent-{name}:v-m1")
    monkeypatch.setattr(mount, "agent_payload_bytes", lambda api, scaffold: int(0.57 * gb))
    monkeypatch.setattr(agent_volume, "agent_volumes", lambda api, owner_uid=None: volumes)
    monkeypatch.setattr(agent_volume, "ensure_agent_volume",
                        lambda api, m: filled.append(m.scaffold) or volumes.append({"Name": "v"}) or "v")
    monkeypatch.setattr(mount, "docker_free_bytes", lambda api: ("/var/lib/docker", bake.DISK_RESERVE_BYTES))
    with pytest.raises(UserError, match="no room for the ohsdk agent's volume: it stores 0.57 GiB"):
        mount.prepare_agent_mount("ohsdk", log=lambda _m: None)
    monkeypatch.setattr(mount, "docker_free_bytes", lambda api: ("/var/lib/docker", bake.DISK_RESERVE_BYTES + gb))
    monkeypatch.setattr(agent_volume, "volume_name", lambda m, image_id: "v")
    first = mount.prepare_agent_mount("ohsdk", log=lambda _m: None)
    assert first is not None and first.filled and first.payload_bytes == int(0.57 * gb)
    monkeypatch.setattr(mount, "docker_free_bytes", lambda api: ("/var/lib/docker", 0))  # full now: no matter
    again = mount.prepare_agent_mount("ohsdk", log=lambda _m: None)
    assert again is not None and not again.filled
