"""Trial runner logic that needs no docker: configs, agent specs, reward/reason reduction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkit.errors import UserError
from rlkit.rollout.trial import (
    VERIFIER_IMPORT_PATH,
    TrialSpec,
    agent_config,
    environment_import_path,
    outcome_from_result,
    trial_config,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "median-even-length"


def test_agent_specs():
    assert agent_config("oracle").name == "oracle"
    assert agent_config("noop").name == "nop"
    assert agent_config("terminus-2").name == "terminus-2"
    custom = agent_config("pkg.mod:MyAgent")
    assert custom.import_path == "pkg.mod:MyAgent" and custom.name is None
    full = agent_config({"import_path": "pkg.mod:MyAgent", "kwargs": {"temperature": 0.5}, "model_name": "m"})
    assert full.kwargs == {"temperature": 0.5} and full.model_name == "m"
    assert agent_config(full) is full
    with pytest.raises(UserError):
        agent_config("")


def test_spec_accepts_a_harbor_agent_config_with_secrets():
    from harbor.models.trial.config import AgentConfig

    config = AgentConfig(name="terminus-2", model_name="hosted_vllm/m", env={"OPENAI_API_KEY": "sk-secret"},
                         kwargs={"api_base": "http://127.0.0.1:8000/v1"})
    spec = TrialSpec(task_dir=EXAMPLE, agent=config)
    rebuilt = agent_config(spec.agent)
    assert rebuilt.name == "terminus-2" and rebuilt.model_name == "hosted_vllm/m"
    assert rebuilt.env == {"OPENAI_API_KEY": "sk-secret"}
    assert rebuilt.kwargs == {"api_base": "http://127.0.0.1:8000/v1"}


def test_backends():
    assert environment_import_path("docker") == "rlkit.sandbox.docker:DockerEnvironment"
    assert environment_import_path("my.mod:Env") == "my.mod:Env"
    with pytest.raises(UserError, match="unknown sandbox backend"):
        environment_import_path("podman")


def test_trial_config_follows_the_manual_layout(tmp_path: Path):
    spec = TrialSpec(task_dir=EXAMPLE, agent="nop", trials_root=tmp_path / "harbor_trials", project="p",
                     experiment="e", step=3, environment_kwargs={"network": "none"},
                     agent_timeout_sec=5, verifier_timeout_sec=7)
    config = trial_config(spec, "sess-1")
    assert config.trials_dir == (tmp_path / "harbor_trials" / "p" / "e" / "step_3").resolve()
    assert config.trial_name == "sess-1"
    assert config.environment.import_path == "rlkit.sandbox.docker:DockerEnvironment"
    assert config.environment.delete is True
    assert config.environment.kwargs == {"project": "p", "experiment": "e", "step": 3, "session": "sess-1",
                                         "network": "none", "image": "rlkit-task/median-even-length:latest"}
    assert config.verifier.import_path == VERIFIER_IMPORT_PATH
    assert config.agent.override_timeout_sec == 5 and config.verifier.override_timeout_sec == 7
    assert TrialSpec(task_dir=EXAMPLE, trials_dir=tmp_path / "x").step_dir() == tmp_path / "x"


def test_spec_rejects_unknown_keys():
    with pytest.raises(ValueError):
        TrialSpec(task_dir=EXAMPLE, agnet="nop")


def _timing(seconds: float) -> SimpleNamespace:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return SimpleNamespace(started_at=start, finished_at=start + timedelta(seconds=seconds))


def _result(rewards: dict | None, exc_type: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        verifier_result=SimpleNamespace(rewards=rewards) if rewards is not None else None,
        exception_info=SimpleNamespace(exception_type=exc_type, exception_message=f"{exc_type} happened")
        if exc_type else None,
        environment_setup=_timing(1.5), agent_setup=None, agent_execution=_timing(2), verifier=_timing(0.5))


@pytest.mark.parametrize("rewards, exc_type, verifier_failure, reward, reason, shown", [
    ({"reward": 1}, None, None, 1.0, "passed", None),
    ({"reward": 0.0}, "AgentTimeoutError", None, 0.0, "agent_timeout", "AgentTimeoutError"),
    ({"reward": 1}, "NonZeroAgentExitCodeError", None, 1.0, "agent_error", "NonZeroAgentExitCodeError"),
    ({"a": 1, "b": 0}, None, None, 0.5, "passed", None),
    ({"reward": 0}, None, None, 0.0, "failed_tests", None),
    (None, "RewardFileNotFoundError", "RewardFileNotFoundError", 0.0, "no_reward_file", "RewardFileNotFoundError"),
    (None, "VerifierTimeoutError", "CancelledError", 0.0, "verifier_timeout", "VerifierTimeoutError"),
    # harbor keeps only the first exception: the verifier's own failure must still decide the reason
    (None, "AgentTimeoutError", "CancelledError", 0.0, "verifier_timeout", "VerifierTimeoutError"),
    (None, "AgentTimeoutError", "RewardFileNotFoundError", 0.0, "no_reward_file", "RewardFileNotFoundError"),
    (None, "AgentTimeoutError", None, 0.0, "agent_timeout", "AgentTimeoutError"),
    (None, "EnvironmentStartTimeoutError", None, 0.0, "sandbox_error", "EnvironmentStartTimeoutError"),
    (None, "VerifierOutputParseError", "VerifierOutputParseError", 0.0, "verifier_error",
     "VerifierOutputParseError"),
    (None, "KeyError", None, 0.0, "error", "KeyError"),
    # the verifier's tamper check wins over the grade it would have given
    ({"reward": 1}, None, "TamperSuspectError", 1.0, "tamper_suspect", None),
])
def test_reward_and_reason(tmp_path, rewards, exc_type, verifier_failure, reward, reason, shown):
    outcome = outcome_from_result("t", "s", tmp_path, _result(rewards, exc_type), verifier_failure, total=9.0)
    assert (outcome.reward, outcome.reason, outcome.exception_type) == (reward, reason, shown)
    assert outcome.timings == {"environment_setup": 1.5, "agent_execution": 2.0, "verifier": 0.5, "total": 9.0}
    assert outcome.graded == (rewards is not None)


def test_a_task_named_with_a_slash_gets_one_image_name_everywhere(tmp_path: Path):
    """The index, `rlkit images build` and the trial runner name a dataset's task alike."""
    import shutil

    from rlkit.tasks.images import discover_tasks
    from rlkit.tasks.index import row_for_task
    from rlkit.tasks.task import load_task

    task_dir = tmp_path / "regex-log"
    shutil.copytree(EXAMPLE, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('version = "1.0"', 'version = "1.0"\n[task]\nname = "terminal-bench/regex-log"', 1))
    expected = "rlkit-task/terminal-bench-regex-log:latest"
    row = row_for_task(load_task(task_dir), "train")
    assert row.task_id == "terminal-bench/regex-log" and row.image == expected
    assert [spec.image for spec in discover_tasks(task_dir)] == [expected]
    config = trial_config(TrialSpec(task_dir=task_dir, trials_root=tmp_path), "s")
    assert config.environment.kwargs["image"] == expected
    baked = trial_config(TrialSpec(task_dir=task_dir, trials_root=tmp_path,
                                   environment_kwargs={"image_variant": "cc", "registry": "reg:5000"}), "s")
    assert baked.environment.kwargs["image"] == "reg:5000/rlkit-task/terminal-bench-regex-log:cc"
