"""Grading by construction, in real trials against real docker (issue 46).

Each of the eight attacks (`attacks.ATTACKS`) is shown to earn reward 1 from the grader rlkit
had before: its own verifier grading in place with the exit-status rule (the task declared
`grading = "in-place"`, the verifier's record of the tests blinded). With rlkit's defaults (a
clean grading container, the record of every test) it earns 0, on the bundled task and on a
task graded by plain `python3 -m pytest`. Honest solutions (`attacks.HONEST`) earn 1 and are
never flagged, graded either way.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.rollout import _verifier
from rlkit.rollout._test_record import RecordPlan
from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from tests.rollout.attacks import ATTACKS, HONEST
from tests.rollout.conftest import DATA, EXAMPLES
from tests.rollout.conftest import in_place_copy as task_in_place
from tests.rollout.scripted import AGENT, BUNDLED, LEGIT, PLAIN

pytestmark = pytest.mark.docker

TASKS = {BUNDLED: EXAMPLES / "merge-intervals", PLAIN: DATA / "log-error-count"}


def in_place_copy(task: str, root: Path) -> Path:
    return task_in_place(TASKS[task], root)


def _spec(task_dir: Path, script: str, solve: bool = False) -> TrialSpec:
    kwargs = {"variant": "custom", "script": script}
    if solve:
        kwargs["solve"] = str(task_dir / "solution" / "solve.sh")
    return TrialSpec(task_dir=task_dir, agent={"import_path": AGENT, "kwargs": kwargs})


def run(root: Path, specs: dict[str, TrialSpec]) -> dict[str, TrialOutcome]:
    specs = {name: spec.model_copy(update={"trials_root": root, "session": name.replace("/", "-"),
                                           "environment_kwargs": {"network": "none"}})
             for name, spec in specs.items()}
    outcomes = asyncio.run(run_trials(list(specs.values()), max_concurrency=4))
    return dict(zip(specs, outcomes, strict=True))


def grading_record(outcome: TrialOutcome) -> dict:
    return json.loads((outcome.trial_dir / "sandbox_changes.json").read_text())


def _blind_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_verifier, "record_plan", lambda text: RecordPlan("exit-status", "blinded (control)"))


def _attacks(names: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, TrialOutcome]:
    pairs = [(name, task) for name in names for task in sorted(ATTACKS[name].tasks)]
    with monkeypatch.context() as patched:
        _blind_record(patched)
        control = run(tmp_path / "control", {f"{task}/{name}": _spec(in_place_copy(task, tmp_path),
                                                                     ATTACKS[name].scripts[task])
                                             for name, task in pairs})
    for key, outcome in control.items():  # the old grader pays the attack
        assert (outcome.reward, outcome.reason) == (1.0, "passed"), (key, outcome)
    checked = run(tmp_path / "checked", {f"{task}/{name}": _spec(TASKS[task], ATTACKS[name].scripts[task])
                                         for name, task in pairs})
    for key, outcome in checked.items():
        assert outcome.reward == 0.0, (key, outcome)
        assert outcome.reason in ("failed_tests", "tests_missing", "tamper_suspect"), (key, outcome)
        if outcome.reason != "tamper_suspect":
            assert grading_record(outcome)["grading"]["mode"] == "clean", key
    return checked


def test_attacks_outside_the_work_product_and_an_early_exit_earn_nothing(base_image, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """Kinds 1 (the shell's NSS module), 3 (a zip on the default path) and 8 (an early exit 0)."""
    checked = _attacks(["nss_module", "zip_on_default_path", "package_exits_early"], tmp_path, monkeypatch)
    for task in (BUNDLED, PLAIN):
        assert checked[f"{task}/nss_module"].reason == "failed_tests"  # nothing of /etc reached the tests
        early = checked[f"{task}/package_exits_early"]
        assert early.reason == "tests_missing" and early.exception_type == "TestsMissingError", early
        recorded = grading_record(early)["grading"]
        assert recorded["recorded"]["present"] is False and recorded["pristine_tests"] in (3, 5)


@pytest.mark.slow
def test_every_attack_of_issue_46_earns_1_from_the_old_grader_and_0_from_rlkit(base_image, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    assert len(ATTACKS) == 8
    checked = _attacks(sorted(ATTACKS), tmp_path, monkeypatch)
    table = {key: (o.reward, o.reason) for key, o in checked.items()}
    (tmp_path / "table.json").write_text(json.dumps(table, indent=1))


def _honest(tmp_path: Path, names: list[str], in_place: bool) -> dict[str, TrialOutcome]:
    specs = {}
    for task in (BUNDLED, PLAIN):
        task_dir = in_place_copy(task, tmp_path) if in_place else TASKS[task]
        specs |= {f"{task}/{name}": _spec(task_dir, HONEST[name].script, solve=True) for name in names}
    return run(tmp_path / ("in-place" if in_place else "clean"), specs)


def _assert_honest(outcomes: dict[str, TrialOutcome]) -> None:
    for key, outcome in outcomes.items():
        assert (outcome.reward, outcome.reason) == (1.0, "passed"), (key, outcome)
        record = grading_record(outcome)
        assert record["findings"] == [] and not record["suspect"], (key, record["findings"])
        assert record["grading"]["record"] == "pytest" and record["grading"]["record_verdict"] is None, key


def test_the_issues_two_honest_config_files_are_not_flagged(base_image, tmp_path: Path):
    """/app/pytest.ini and /app/setup.cfg: neither command reads them (-c /dev/null; paths under /tests)."""
    _assert_honest(_honest(tmp_path, ["pytest_ini", "setup_cfg"], in_place=False))
    _assert_honest(_honest(tmp_path, ["pytest_ini", "setup_cfg"], in_place=True))


@pytest.mark.slow
def test_every_honest_variant_earns_1_graded_clean_or_in_place(base_image, tmp_path: Path):
    outcomes = _honest(tmp_path, sorted(HONEST), in_place=False)
    _assert_honest(outcomes)
    carried = grading_record(outcomes[f"{PLAIN}/virtualenv"])["grading"]["carried"][0]
    assert any(d.startswith("symlink /app/.venv/") for d in carried["dropped"]), carried  # links stay behind
    _assert_honest(_honest(tmp_path, sorted(HONEST), in_place=True))
    # a pip install whose command writes the answer: graded clean, the answer is in /app
    pip = run(tmp_path / "pip", {"pip": TrialSpec(task_dir=TASKS[PLAIN], agent={
        "import_path": AGENT, "kwargs": {"variant": "pip_install_package"}})})["pip"]
    assert LEGIT["pip_install_package"].solves and (pip.reward, pip.reason) == (1.0, "passed"), pip
