"""Trials against real dockerd: bundled tasks graded by their own tests, and every error path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit_main
from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from tests.rollout.conftest import DATA, EXAMPLES, containers_of

pytestmark = pytest.mark.docker

DEFAULT_TASKS = ["slugify-trailing-dash", "lru-cache-recency", "calc-power-unary"]
OFFLINE = {"network": "none"}  # the test-data tasks need no network; keeps them off docker's bridge
PROJECT = "proj"  # the sweeps' own: other tests and `rlkit tasks check` run sessions of the same names


def _sweep(root: Path, tasks: list[str], step: int) -> dict[tuple[str, str], TrialOutcome]:
    # no network kwarg: the sandbox follows the task's own network_mode (no-network)
    specs = [TrialSpec(task_dir=EXAMPLES / task, agent=agent, trials_root=root, project=PROJECT, experiment="exp",
                       step=step, session=f"{task}__{agent}") for task in tasks for agent in ("oracle", "nop")]
    outcomes = asyncio.run(run_trials(specs, max_concurrency=4))
    return {(spec.task_dir.name, str(spec.agent)): outcome for spec, outcome in zip(specs, outcomes, strict=True)}


def _assert_oracle_1_nop_0(outcomes: dict[tuple[str, str], TrialOutcome]) -> None:
    for (task, agent), outcome in outcomes.items():
        expected = 1.0 if agent == "oracle" else 0.0
        reason = "passed" if agent == "oracle" else "failed_tests"
        assert (outcome.reward, outcome.reason) == (expected, reason), (task, agent, outcome)
        assert containers_of(outcome.session, PROJECT) == [], f"sandbox of {task}/{agent} was not removed"


def test_oracle_gets_1_and_nop_gets_0(task_images, tmp_path: Path):
    outcomes = _sweep(tmp_path / "harbor_trials", DEFAULT_TASKS, step=3)
    _assert_oracle_1_nop_0(outcomes)

    # harbor's trial layout under harbor_trials/<project>/<exp>/step_<N>/<session>/
    outcome = outcomes[("lru-cache-recency", "oracle")]
    assert outcome.trial_dir == (tmp_path / "harbor_trials" / "proj" / "exp" / "step_3" /
                                 "lru-cache-recency__oracle").resolve()
    trial_dir = outcome.trial_dir
    result = json.loads((trial_dir / "result.json").read_text())
    config = json.loads((trial_dir / "config.json").read_text())
    assert config["trial_name"] == "lru-cache-recency__oracle"
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    assert result["exception_info"] is None
    for block in ("environment_setup", "agent_setup", "agent_execution", "verifier"):
        assert result[block]["started_at"] and result[block]["finished_at"], block
    assert (trial_dir / "agent" / "oracle.txt").is_file()
    assert "5 passed" in (trial_dir / "verifier" / "test-stdout.txt").read_text()
    assert set(outcome.timings) >= {"environment_setup", "agent_execution", "verifier", "total"}


@pytest.mark.slow
def test_every_bundled_task_oracle_1_nop_0(task_images, tmp_path: Path):
    tasks = sorted(p.parent.name for p in EXAMPLES.glob("*/task.toml"))
    assert len(tasks) >= 8
    _assert_oracle_1_nop_0(_sweep(tmp_path, tasks, step=0))


@pytest.fixture(scope="module")
def error_outcomes(task_images, tmp_path_factory) -> dict[str, TrialOutcome]:
    """All error-path trials at once (they mostly wait on timeouts, so run them concurrently)."""
    root = tmp_path_factory.mktemp("harbor_trials")
    median = EXAMPLES / "median-even-length"
    cases = {
        "no_reward_file": TrialSpec(task_dir=DATA / "no-reward-file", agent="nop"),
        "verifier_timeout": TrialSpec(task_dir=DATA / "slow-verifier", agent="nop"),
        "agent_timeout": TrialSpec(task_dir=DATA / "slow-agent", agent="oracle"),
        "json_reward": TrialSpec(task_dir=DATA / "json-reward", agent="nop"),
        "forged": TrialSpec(task_dir=median, agent="tests.rollout.agents:ForgingAgent"),
        "crash": TrialSpec(task_dir=median, agent="tests.rollout.agents:CrashingAgent"),
        "peek": TrialSpec(task_dir=median, agent="tests.rollout.agents:PeekingAgent"),
        "bad_task": TrialSpec(task_dir=root / "does-not-exist", agent="nop"),
        "good_neighbour": TrialSpec(task_dir=median, agent="oracle"),
    }
    specs = [spec.model_copy(update={"trials_root": root, "session": f"err-{name}", "environment_kwargs": OFFLINE})
             for name, spec in cases.items()]
    outcomes = asyncio.run(run_trials(specs, max_concurrency=len(specs)))
    return dict(zip(cases, outcomes, strict=True))


def test_missing_reward_file_is_reward_0_not_a_crash(error_outcomes):
    outcome = error_outcomes["no_reward_file"]
    assert (outcome.reward, outcome.reason, outcome.exception_type) == (0.0, "no_reward_file",
                                                                        "RewardFileNotFoundError")
    result = json.loads((outcome.trial_dir / "result.json").read_text())
    assert result["exception_info"]["exception_type"] == "RewardFileNotFoundError"


def test_verifier_timeout_reason(error_outcomes):
    outcome = error_outcomes["verifier_timeout"]
    assert (outcome.reward, outcome.reason) == (0.0, "verifier_timeout")


def test_agent_timeout_reason_and_still_graded(error_outcomes):
    outcome = error_outcomes["agent_timeout"]
    assert (outcome.reason, outcome.exception_type) == ("agent_timeout", "AgentTimeoutError")
    # the verifier still ran; the killed solve.sh never created /tmp/solved
    assert outcome.graded and outcome.reward == 0.0


def test_reward_json_is_read_before_txt(error_outcomes):
    outcome = error_outcomes["json_reward"]
    assert outcome.reward == 0.75 and outcome.rewards == {"reward": 0.75, "tests_passed": 3.0}


def test_forged_reward_is_ignored(error_outcomes):
    outcome = error_outcomes["forged"]
    assert (outcome.reward, outcome.reason) == (0.0, "failed_tests")
    verifier_dir = outcome.trial_dir / "verifier"
    assert (verifier_dir / "reward.txt").read_text().strip() == "0"
    assert not (verifier_dir / "reward.json").exists()
    assert "failed" in (verifier_dir / "test-stdout.txt").read_text()  # the real tests ran and failed


def test_tests_and_solution_are_hidden_during_the_agent_turn(error_outcomes):
    outcome = error_outcomes["peek"]
    peek = (outcome.trial_dir / "agent" / "peek.txt").read_text()
    assert peek.endswith("end\n")
    assert "test_graded.py" not in peek and "test.sh" not in peek and "solve.sh" not in peek
    assert "No such file or directory" in peek
    # ...and the verifier still copied them in afterwards and graded the untouched project
    assert (outcome.reward, outcome.reason) == (0.0, "failed_tests")
    assert "failed" in (outcome.trial_dir / "verifier" / "test-stdout.txt").read_text()


def test_agent_crash_is_graded_and_cleaned_up(error_outcomes):
    outcome = error_outcomes["crash"]
    assert (outcome.reward, outcome.reason, outcome.exception_type) == (0.0, "agent_error", "RuntimeError")


def test_one_failing_trial_never_sinks_the_others(error_outcomes):
    bad = error_outcomes["bad_task"]
    assert (bad.reason, bad.exception_type) == ("error", "UserError")
    assert (error_outcomes["good_neighbour"].reward, error_outcomes["good_neighbour"].reason) == (1.0, "passed")


def test_every_sandbox_is_removed(error_outcomes):
    for name, outcome in error_outcomes.items():
        assert containers_of(outcome.session or f"err-{name}") == [], name


def test_cli_trial(task_images, tmp_path: Path, capsys):
    code = rlkit_main(["trial", str(EXAMPLES / "word-frequency"), "--agent", "nop", "--trials-dir", str(tmp_path),
                       "--network", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "reward=0" in out and "reason=failed_tests" in out
    assert len(list(tmp_path.glob("word-frequency__*/result.json"))) == 1


def _agent_running(session: str) -> bool:
    """The slow agent's `sleep 120` runs in the trial's container (through docker exec or the
    backend's exec session alike)."""
    from rlkit.sandbox.docker_api import api_client

    containers = containers_of(session)
    if not containers:
        return False
    try:
        processes = api_client().top(containers[0]["Id"]).get("Processes") or []
    except Exception:  # noqa: BLE001 — removed between the two calls
        return False
    return any("sleep 120" in " ".join(row) for row in processes)


def test_cancelled_trial_still_removes_its_sandbox(task_images, tmp_path: Path):
    from rlkit.rollout.trial import run_trial

    session = f"cancel-{tmp_path.name}"
    spec = TrialSpec(task_dir=DATA / "slow-agent", agent="oracle", trials_root=tmp_path, session=session,
                     agent_timeout_sec=300, environment_kwargs=OFFLINE)

    async def cancel_mid_agent() -> bool:
        task = asyncio.create_task(run_trial(spec))
        for _ in range(600):  # wait (up to a minute) until the sandbox exists and the agent runs in it
            await asyncio.sleep(0.1)
            if _agent_running(session):
                break
        seen = bool(containers_of(session))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(cancel_mid_agent()), "the trial never started its sandbox"
    assert containers_of(session) == []
