"""Grading an agent cannot fool, in real trials against real docker.

Hostile agents (`scripted.HOSTILE`) change the sandbox so that the tests pass without the task
being solved. Each is shown to earn reward 1 from harbor's stock verifier (the control: no check,
commands found on PATH) and reward 0 from rlkit's, on a bundled task (pytest -I from /tests) and
on a Terminal-Bench-style task graded by plain `python3 -m pytest` from /app. Legitimate solutions
(`scripted.LEGIT`) that install packages, add commands, compile code or run Python are graded as
they deserve and never flagged; nor is any task's oracle.

These trials grade in place (the tasks declared `grading = "in-place"`, as a task whose result is
the container's state does): the judgement is what guards them. Tasks whose result is files are
graded in a clean container by default (`test_grading_docker.py`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.rollout import trial
from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from tests.rollout.conftest import DATA, EXAMPLES
from tests.rollout.conftest import in_place_copy as task_in_place
from tests.rollout.scripted import AGENT, BUNDLED, HOSTILE, LEGIT, PLAIN

pytestmark = pytest.mark.docker

TASKS = {BUNDLED: EXAMPLES / "merge-intervals", PLAIN: DATA / "log-error-count"}
STOCK_VERIFIER = "harbor.verifier.verifier:Verifier"  # the control: no tamper check at all


def _spec(task: str, variant: str, solve: bool = False, root: Path | None = None) -> TrialSpec:
    """The variant on the task, graded in place (a copy of the task under `root` that declares it)."""
    task_dir = task_in_place(TASKS[task], root) if root is not None else TASKS[task]
    kwargs = {"variant": variant}
    if solve:
        kwargs["solve"] = str(task_dir / "solution" / "solve.sh")
    return TrialSpec(task_dir=task_dir, agent={"import_path": AGENT, "kwargs": kwargs})


def _run(root: Path, specs: dict[str, TrialSpec], monkeypatch: pytest.MonkeyPatch | None = None
         ) -> dict[str, TrialOutcome]:
    """Run the trials (with harbor's stock verifier when `monkeypatch` is given)."""
    if monkeypatch is not None:
        monkeypatch.setattr(trial, "VERIFIER_IMPORT_PATH", STOCK_VERIFIER)
    specs = {name: spec.model_copy(update={"trials_root": root, "session": name.replace("/", "-"),
                                           "environment_kwargs": {"network": "none"}})
             for name, spec in specs.items()}
    try:
        outcomes = asyncio.run(run_trials(list(specs.values()), max_concurrency=4))
    finally:
        if monkeypatch is not None:
            monkeypatch.undo()
    return dict(zip(specs, outcomes, strict=True))


def _record(outcome: TrialOutcome) -> dict:
    return json.loads((outcome.trial_dir / "sandbox_changes.json").read_text())


def _assert_caught(name: str, outcome: TrialOutcome, expected_reason: str) -> None:
    assert (outcome.reward, outcome.reason) == (0.0, expected_reason), (name, outcome)
    record = _record(outcome)
    if expected_reason == "tamper_suspect":
        assert outcome.exception_type == "TamperSuspectError" and record["suspect"] and record["findings"], name
        assert record["source"] == "overlay-upper"
        assert not (outcome.trial_dir / "verifier" / "test-stdout.txt").exists()  # the tests never ran
    else:  # neutralized: the tests ran without the agent's cache or plugin, and failed honestly
        assert not record["suspect"] and (record["removed_bytecode"] or record["notes"]), (name, record)


def _control_and_checked(root: Path, pairs: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = sorted({task for _name, task in pairs})
    control = _run(root / "control", {f"{task}/{name}": _spec(task, name, root=root) for name, task in pairs
                                      if task in HOSTILE[name].beats}
                   | {f"{task}/nop": TrialSpec(task_dir=task_in_place(TASKS[task], root), agent="nop") for task in tasks},
                   monkeypatch)
    for key, outcome in control.items():
        if key.endswith("/nop"):  # the task is not solved: its tests fail
            assert (outcome.reward, outcome.reason) == (0.0, "failed_tests"), (key, outcome)
        else:  # ... yet the variant fools a verifier with no check
            assert (outcome.reward, outcome.reason) == (1.0, "passed"), (key, outcome)
    checked = _run(root / "checked", {f"{task}/{name}": _spec(task, name, root=root) for name, task in pairs})
    for key, outcome in checked.items():
        task, name = key.split("/")
        if task not in HOSTILE[name].beats and outcome.reason == "failed_tests":
            continue  # no effect on this task's command (/conftest.py beside `--noconftest`): not a finding
        _assert_caught(key, outcome, HOSTILE[name].reason)


def test_new_kinds_of_steering_fool_the_stock_verifier_and_not_rlkits(base_image, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """One of each kind a list of names missed, on the plain `python3 -m pytest` task."""
    pairs = [(name, PLAIN) for name in ("site_package_shadow", "sourceless_bytecode", "pytest11_entry_point",
                                        "usercustomize_package", "verifier_chmod_shadow")]
    _control_and_checked(tmp_path, pairs, monkeypatch)


@pytest.mark.slow
def test_every_hostile_agent_fools_the_stock_verifier_and_not_rlkits(base_image, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """All variants on both tasks; controls only where the variant fools that task's test.sh."""
    assert len(HOSTILE) >= 15
    assert all(HOSTILE[n].beats & {BUNDLED} for n in ("site_package_shadow", "sourceless_bytecode",
                                                      "pytest11_entry_point", "verifier_chmod_shadow"))
    _control_and_checked(tmp_path, [(name, task) for name in HOSTILE for task in TASKS], monkeypatch)


@pytest.mark.slow
def test_legitimate_solutions_are_graded_as_deserved_and_never_flagged(base_image, tmp_path: Path):
    assert len(LEGIT) >= 6
    specs = {f"{PLAIN}/{name}": _spec(PLAIN, name, solve=not legit.solves, root=tmp_path)
             for name, legit in LEGIT.items()}
    specs |= {f"{BUNDLED}/{name}": _spec(BUNDLED, name, solve=True, root=tmp_path) for name, legit in LEGIT.items()
              if not legit.solves}
    outcomes = _run(tmp_path, specs)
    for key, outcome in outcomes.items():
        deserved = 0.0 if key.endswith("/wrong_answer") else 1.0
        assert outcome.reward == deserved, (key, outcome)
        assert outcome.reason == ("passed" if deserved else "failed_tests"), (key, outcome)
        record = _record(outcome)
        assert not record["suspect"] and record["findings"] == [], (key, record["findings"])
    installed = _record(outcomes[f"{PLAIN}/pip_install_package"])
    assert "A /usr/local/bin/logcount" in installed["changes"]  # a new command, a new package: allowed
    plugin = _record(outcomes[f"{PLAIN}/pip_install_with_pytest_plugin"])
    assert [n["rule"] for n in plugin["notes"]] == ["inert"]  # cannot auto-load: noted, not flagged
    compiled = _record(outcomes[f"{PLAIN}/compile_code"])
    assert any("/usr/lib/python3.11/json/__pycache__/" in p for p in compiled["removed_bytecode"])


@pytest.mark.slow
def test_honest_oracle_is_never_flagged_on_any_bundled_task(task_images, tmp_path: Path):
    tasks = sorted(p.parent.name for p in EXAMPLES.glob("*/task.toml"))
    assert len(tasks) == 10
    specs = {task: TrialSpec(task_dir=EXAMPLES / task, agent="oracle") for task in tasks}
    specs["log-error-count"] = TrialSpec(task_dir=TASKS[PLAIN], agent="oracle")
    for task, outcome in _run(tmp_path, specs).items():
        assert (outcome.reason, outcome.reward) == ("passed", 1.0), (task, outcome)
        record = _record(outcome)
        assert record["findings"] == [] and record["changes"], task
