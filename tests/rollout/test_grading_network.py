"""A test.sh that fails because it downloads tools at grading time is a verifier error, not a wrong answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rlkit.rollout._verifier import grading_network_failure
from rlkit.rollout.trial import TrialSpec, run_trial
from tests.rollout.conftest import DATA


@pytest.mark.parametrize("line, found", [
    ("curl: (6) Could not resolve host: astral.sh", "curl: (6)"),
    ("urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
     "Temporary failure in name resolution"),
    ("ERROR: No matching distribution found for pytest==8.3.4", "No matching distribution found for"),
    ("FAILED test_outputs.py::test_answer - assert 41 == 42", None),
])
def test_network_failures_are_recognised(tmp_path: Path, line: str, found: str | None):
    stdout = tmp_path / "test-stdout.txt"
    stdout.write_text(f"collected 3 items\n{line}\n")
    assert grading_network_failure(stdout) == found
    assert grading_network_failure(tmp_path / "absent.txt") is None


@pytest.mark.docker
def test_downloading_at_grading_time_is_a_verifier_error(base_image, tmp_path: Path):
    outcome = asyncio.run(run_trial(TrialSpec(task_dir=DATA / "downloads-at-grading", agent="oracle",
                                              trials_root=tmp_path, environment_kwargs={"network": "none"})))
    assert (outcome.reason, outcome.reward, outcome.exception_type) == ("verifier_error", 0.0,
                                                                         "VerifierNetworkError")
    assert "grading time" in (outcome.exception_message or "")
    assert "Temporary failure in name resolution" in (outcome.trial_dir / "verifier" / "test-stdout.txt").read_text()


@pytest.mark.docker
def test_a_pytest_plugin_the_image_lacks_is_a_verifier_error(base_image, tmp_path: Path):
    """Grading runs with plugin auto-loading off unless the image installed plugins: a test.sh
    that needs one (TB2's `--ctrf`) gets a task fault that says so, not a silent 0."""
    outcome = asyncio.run(run_trial(TrialSpec(task_dir=DATA / "plugin-at-grading", agent="oracle",
                                              trials_root=tmp_path, environment_kwargs={"network": "none"})))
    assert (outcome.reason, outcome.reward, outcome.exception_type) == ("verifier_error", 0.0,
                                                                         "VerifierPluginError")
    assert "--ctrf" in (outcome.exception_message or "") and "install it in the task's image" in outcome.exception_message
