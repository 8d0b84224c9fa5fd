"""Each adapter's env vars, flags and config files, read off the commands harbor's agent
classes would run in a sandbox (a recording stand-in for the sandbox; no docker)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from rlkit.errors import UserError
from rlkit.scaffolds import SCAFFOLDS, ScaffoldRun, get_scaffold

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
RUN = ScaffoldRun(session="trial-7", model="tiny", proxy_url="http://127.0.0.1:8002", max_turns=3)
SESSION_URL = "http://127.0.0.1:8002/s/trial-7"


class RecordingSandbox:
    """Stands in for a harbor environment: records exec commands, env and uploads."""

    default_user = None

    def __init__(self) -> None:
        self.execs: list[tuple[str, dict[str, str]]] = []
        self.uploads: list[str] = []

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> Any:
        from harbor.environments.base import ExecResult

        self.execs.append((command, dict(env or {})))
        return ExecResult(stdout="", stderr="", return_code=0)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        self.uploads.append(target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        self.uploads.append(target_dir)


def _drive(name: str, tmp_path: Path, run: ScaffoldRun = RUN) -> tuple[Any, RecordingSandbox]:
    """Build the agent from the adapter's AgentConfig the way harbor's Trial does; setup + run it."""
    from harbor.agents.factory import AgentFactory
    from harbor.models.agent.context import AgentContext

    config = get_scaffold(name).agent_config(run)
    # No proxy runs here: skip fetching the session record after the run.
    config = config.model_copy(update={"kwargs": {**config.kwargs, "rlkit_trajectory_url": None}})
    agent = AgentFactory.create_agent_from_config(config, logs_dir=tmp_path)
    sandbox = RecordingSandbox()

    async def go() -> None:
        await agent.setup(sandbox)
        await agent.run("fix the bug", sandbox, AgentContext())

    asyncio.run(go())
    return agent, sandbox


def _main_command(sandbox: RecordingSandbox, needle: str) -> tuple[str, dict[str, str]]:
    matches = [(c, e) for c, e in sandbox.execs if needle in c]
    assert matches, f"no command runs {needle!r}: {[c[:80] for c, _ in sandbox.execs]}"
    return matches[-1]


def _assert_no_install(sandbox: RecordingSandbox) -> None:
    for command, _ in sandbox.execs:
        assert not any(word in command for word in ("npm i", "npm install", "apt-get", "uv pip", "install.sh")), \
            f"a baked agent must not install per trial: {command[:200]}"


def test_registry_names_and_did_you_mean() -> None:
    assert SCAFFOLDS.names() == ["cc", "oc", "ohsdk", "terminus"]
    with pytest.raises(UserError) as excinfo:
        get_scaffold("ohsdkk")
    assert "ohsdk" in excinfo.value.fix


def test_cc_points_claude_code_at_the_session(tmp_path: Path) -> None:
    _, sandbox = _drive("cc", tmp_path)
    command, env = _main_command(sandbox, "claude --verbose")
    assert env["ANTHROPIC_BASE_URL"] == SESSION_URL  # the CLI appends /v1/messages
    assert env["ANTHROPIC_MODEL"] == "tiny"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "tiny"  # sub-agents hit the same policy
    assert env["ANTHROPIC_API_KEY"]
    assert "--max-turns 3" in command and "--permission-mode=bypassPermissions" in command
    assert any("claude --version" in c for c, _ in sandbox.execs)  # version check instead of install
    _assert_no_install(sandbox)


def test_oc_writes_opencode_provider_config(tmp_path: Path) -> None:
    _, sandbox = _drive("oc", tmp_path)
    command, env = _main_command(sandbox, "opencode --model=")
    assert "--model=rlkit/tiny" in command
    config_cmd, _ = _main_command(sandbox, "opencode.json")
    config = json.loads(config_cmd.split("echo ", 1)[1].rsplit(" > ", 1)[0].strip("'"))
    provider = config["provider"]["rlkit"]
    assert provider["options"]["baseURL"] == f"{SESSION_URL}/v1"
    assert "tiny" in provider["models"]
    assert config["autoupdate"] is False
    assert env["OPENAI_API_KEY"]
    _assert_no_install(sandbox)


def test_ohsdk_sets_llm_env(tmp_path: Path) -> None:
    agent, sandbox = _drive("ohsdk", tmp_path)
    command, env = _main_command(sandbox, "run_agent.py")
    assert "/opt/openhands-sdk-venv/bin/python /installed-agent/run_agent.py" in command
    assert env["LLM_BASE_URL"] == f"{SESSION_URL}/v1"
    assert env["LLM_MODEL"] == "openai/tiny"
    assert env["MAX_ITERATIONS"] == "3"
    # Overlaid on every exec by harbor's Trial (scoped_exec_env): litellm must stay offline.
    assert agent.extra_env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert "/installed-agent/run_agent.py" in sandbox.uploads
    _assert_no_install(sandbox)


def test_terminus_runs_on_host_without_summarisation(tmp_path: Path) -> None:
    from harbor.agents.factory import AgentFactory

    scaffold = get_scaffold("terminus")
    config = scaffold.agent_config(RUN)
    assert config.model_name == "hosted_vllm/tiny"
    agent = AgentFactory.create_agent_from_config(config, logs_dir=tmp_path)
    assert agent.options.enable_summarize is False
    assert agent.options.api_base == f"{SESSION_URL}/v1"
    assert agent.options.collect_rollout_details is True
    assert agent._max_episodes == 3
    assert not scaffold.runs_in_container
    assert scaffold.environment_kwargs() == {"image_variant": "latest"}  # the task's own network policy
    assert scaffold.environment_import_path("docker") == "rlkit.sandbox.docker:DockerEnvironment"


@pytest.mark.parametrize("name", ["cc", "oc", "ohsdk"])
def test_in_container_agents_are_mounted_into_the_task_image_on_host_network(name: str) -> None:
    from rlkit.scaffolds.bake import agent_mount

    scaffold = get_scaffold(name)
    assert scaffold.runs_in_container
    mounted = agent_mount(scaffold).model_dump()
    assert scaffold.environment_kwargs() == {"image_variant": "latest", "agent_mount": mounted, "network": "host"}
    assert scaffold.environment_kwargs(delivery="bake") == {"image_variant": name, "network": "host"}
    assert scaffold.environment_import_path("docker") == "rlkit.scaffolds.sandbox:ProxyDockerEnvironment"
    assert scaffold.environment_import_path("k8s") == "rlkit.sandbox.k8s:KubernetesEnvironment"
    # K8sOptions has no `network`
    assert scaffold.environment_kwargs("k8s") == {"image_variant": "latest", "agent_mount": mounted}
    assert scaffold.environment_kwargs("k8s", "bake") == {"image_variant": name}
    assert scaffold.agent_config(RUN).kwargs["skip_install"] is True


def test_scaffold_run_rejects_unknown_keys() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ScaffoldRun(session="s", model="m", max_turn=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("backend", ["docker", "k8s"])
def test_trial_fields_fit_the_trial_runner(backend: str) -> None:
    from rlkit.rollout.trial import TrialSpec, agent_config
    from rlkit.sandbox.docker import DockerOptions
    from rlkit.sandbox.k8s import K8sOptions

    options = {"docker": DockerOptions, "k8s": K8sOptions}[backend]
    for name in SCAFFOLDS.names():
        spec = TrialSpec(task_dir=Path("examples/tasks/calc-power-unary"),
                         **get_scaffold(name).trial_fields(RUN, backend=backend))
        options.model_validate(spec.environment_kwargs)  # the backend accepts every kwarg
        agent = agent_config(spec.agent)
        assert agent.import_path.startswith("rlkit.scaffolds._agents:")
        assert agent.kwargs["rlkit_trajectory_url"] == f"{SESSION_URL}/trajectory"
        assert all("****" not in value for value in agent.env.values())  # keys survive, unredacted
        in_container = get_scaffold(name).runs_in_container
        assert (spec.backend == "rlkit.scaffolds.sandbox:ProxyDockerEnvironment") is (in_container
                                                                                     and backend == "docker")


@pytest.mark.parametrize("name", ["cc", "oc", "ohsdk", "terminus"])
def test_adapter_agrees_with_the_scaffold_axis_module(name: str) -> None:
    """scripts/templates/scaffold/<name>.env (what a run config composes) and the adapter
    must name the same harbor agent and API dialect."""
    repo = Path(__file__).resolve().parents[2]
    values = dict(line.split("=", 1) for line in (repo / "scripts/templates/scaffold" / f"{name}.env")
                  .read_text().splitlines() if "=" in line and not line.startswith("#"))
    scaffold = get_scaffold(name)
    assert values["AGENT_API"] == scaffold.api_format.value
    from harbor.utils.import_path import import_class

    agent_class = import_class(scaffold.agent_import_path, label="agent")
    assert agent_class.name() == values["HARBOR_AGENT"]


def test_ohsdk_version_check_reads_metadata_instead_of_importing(tmp_path: Path) -> None:
    _, sandbox = _drive("ohsdk", tmp_path)
    [check] = [c for c, _ in sandbox.execs if "openhands" in c and "version" in c]
    assert "importlib.metadata" in check and "import openhands" not in check


@pytest.mark.fake_k8s
@pytest.mark.parametrize("name", ["cc", "oc", "ohsdk"])
def test_fake_k8s_no_network_task_allowlists_only_the_proxy_for_in_pod_agents(name: str, tmp_path: Path) -> None:
    """harbor plans an in-pod agent's network from its base URL; the k8s backend must accept that plan
    (an allowlist of the proxy's address) and refuse a loopback proxy, which no pod can reach."""
    from harbor.models.task.config import NetworkMode
    from harbor.trial.trial import Trial

    from rlkit.rollout.trial import TrialSpec, trial_config
    from tests.sandbox._helpers import write_task

    task = write_task(tmp_path, "offline", task_toml='[environment]\nnetwork_mode = "no-network"\n')

    def create(proxy_url: str) -> Any:
        run = ScaffoldRun(session="trial-7", model="tiny", proxy_url=proxy_url, max_turns=3)
        spec = TrialSpec(task_dir=task, trials_dir=tmp_path / "trials",
                         **get_scaffold(name).trial_fields(run, backend="k8s"))
        return asyncio.run(Trial.create(trial_config(spec, f"{name}-trial")))

    policy = create("http://10.0.0.5:8002").agent_environment.network_policy
    assert (policy.network_mode, policy.allowed_hosts) == (NetworkMode.ALLOWLIST, ["10.0.0.5"])
    with pytest.raises(ValueError, match="loopback inside a pod is the pod itself"):
        create("http://127.0.0.1:8002")
