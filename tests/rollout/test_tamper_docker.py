"""The sandbox tamper check in real trials: agents that steer a naive verifier from outside
/tests get `tamper_suspect` and no reward; honest oracles are never flagged."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from tests.rollout.agents import RootConftestAgent
from tests.rollout.conftest import DATA, EXAMPLES

pytestmark = pytest.mark.docker

NAIVE = DATA / "naive-pytest"
OFFLINE = {"network": "none"}


def _run(root: Path, specs: dict[str, TrialSpec]) -> dict[str, TrialOutcome]:
    specs = {name: spec.model_copy(update={"trials_root": root, "session": f"tamper-{name}",
                                           "environment_kwargs": OFFLINE}) for name, spec in specs.items()}
    outcomes = asyncio.run(run_trials(list(specs.values()), max_concurrency=4))
    return dict(zip(specs, outcomes, strict=True))


def _changes(outcome: TrialOutcome) -> dict:
    return json.loads((outcome.trial_dir / "sandbox_changes.json").read_text())


def _in_fresh_sandbox(script: str) -> str:
    """stdout of `script` in a new container of the naive task's image with its tests at /tests."""
    from rlkit.sandbox.docker_api import api_client
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    [built] = build_task_images(discover_tasks(NAIVE))
    api = api_client()
    host_config = api.create_host_config(binds={str(NAIVE / "tests"): {"bind": "/tests", "mode": "ro"}},
                                         network_mode="none")
    container = api.create_container(built.image, command=["bash", "-c", script], host_config=host_config,
                                     labels={"rlkit.test": "tamper"})
    try:
        api.start(container)
        api.wait(container, timeout=120)
        return api.logs(container, stdout=True, stderr=False).decode()
    finally:
        api.remove_container(container, force=True)


def test_a_planted_root_conftest_would_pass_the_naive_verifier(base_image):
    """The control: without the check, /conftest.py turns a wrong answer into reward 1."""
    plant = RootConftestAgent.SCRIPT
    out = _in_fresh_sandbox(f"{plant}\nbash /tests/test.sh >/dev/null 2>&1; cat /logs/verifier/reward.txt")
    assert out.strip() == "1"
    out = _in_fresh_sandbox("bash /tests/test.sh >/dev/null 2>&1; cat /logs/verifier/reward.txt")
    assert out.strip() == "0"


def test_steering_agents_get_tamper_suspect_and_no_reward(base_image, tmp_path: Path):
    outcomes = _run(tmp_path, {
        "conftest": TrialSpec(task_dir=NAIVE, agent="tests.rollout.agents:RootConftestAgent"),
        "pytest_py": TrialSpec(task_dir=NAIVE, agent="tests.rollout.agents:ShadowPytestAgent"),
        "pth": TrialSpec(task_dir=NAIVE, agent="tests.rollout.agents:PthAgent"),
        "oracle": TrialSpec(task_dir=NAIVE, agent="oracle"),
    })
    expected = {"conftest": ("/conftest.py", "pytest_config"), "pytest_py": ("/app/pytest.py", "shadow_module"),
                "pth": ("zz-steer.pth", "pth_file")}
    for name, (path, rule) in expected.items():
        outcome = outcomes[name]
        assert (outcome.reason, outcome.reward, outcome.rewards) == ("tamper_suspect", 0.0, {}), (name, outcome)
        assert outcome.exception_type == "TamperSuspectError"
        record = _changes(outcome)
        assert record["suspect"] and record["source"] == "overlay-upper" and record["workdir"] == "/app"
        assert [(f["path"].endswith(path), f["rule"]) for f in record["findings"]] == [(True, rule)], record
        assert not (outcome.trial_dir / "verifier" / "test-stdout.txt").exists()  # the tests never ran
    honest = outcomes["oracle"]
    assert (honest.reason, honest.reward) == ("passed", 1.0)
    record = _changes(honest)
    assert not record["suspect"] and "C /app/answer.py" in record["changes"]


@pytest.mark.slow
def test_honest_oracle_is_never_flagged_on_any_bundled_task(task_images, tmp_path: Path):
    tasks = sorted(p.parent.name for p in EXAMPLES.glob("*/task.toml"))
    assert len(tasks) == 10
    outcomes = _run(tmp_path, {task: TrialSpec(task_dir=EXAMPLES / task, agent="oracle") for task in tasks})
    for task, outcome in outcomes.items():
        assert (outcome.reason, outcome.reward) == ("passed", 1.0), (task, outcome)
        record = _changes(outcome)
        assert record["findings"] == [] and record["changes"], task
