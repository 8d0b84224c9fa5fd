"""The local trainer's step whose every trial was masked: no update, a log line, a count the step line and
the checkpoint carry, and `update_skipped` in the step's summary.json (status and the dashboard read it).

`SkippedSteps.trainable` is what `LocalTrainer._train` calls between the rollout and the update; the records
here are built by hand (no rollout ran), which is all the decision reads."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.rollout.records import Outcome, StepResult, TokenSegment, TrialRecord
from rlkit.rollout.step_file import add_trial
from rlkit.rollout.summary import summarize, write_summary
from rlkit.train.skip import SKIPPED, SKIPPED_STEPS, SkippedSteps


def _record(uid: str, *, masked: bool, outcome: Outcome) -> TrialRecord:
    segments = [TokenSegment(prompt_ids=[1, 2], response_ids=[3, 4], response_mask=[1, 1],
                             response_logprobs=[-0.5, -0.5])]
    return TrialRecord(uid=uid, task_id="t", session=f"s-{uid}-{masked}", outcome=outcome,
                       reward=0.0 if masked else 1.0, masked=masked, segments=segments)


def _result(step: int, records: list[TrialRecord], step_dir: Path) -> StepResult:
    summary = summarize(step, records, 1.0)
    write_summary(step_dir, summary)  # what the rollout engine wrote before the trainer decides
    return StepResult(step=step, records=records, summary=summary, step_dir=step_dir)


def test_a_fully_masked_step_skips_its_update_is_counted_and_marked_and_the_count_survives_a_resume(
        tmp_path: Path) -> None:
    skipped = SkippedSteps()
    masked = [_record("1:0:t", masked=True, outcome=Outcome.SANDBOX_ERROR),
              _record("1:1:t", masked=True, outcome=Outcome.VERIFIER_ERROR)]
    trainable, metrics, note = skipped.trainable(_result(1, masked, tmp_path / "step_1"), tmp_path / "step_1")
    assert trainable == [] and metrics == {SKIPPED: 1.0, SKIPPED_STEPS: 1.0}
    assert "step 1: every trial was masked" in note and "sandbox_error" in note and "the run goes on" in note
    summary = json.loads((tmp_path / "step_1" / "summary.json").read_text())
    assert summary["update_skipped"] is True and summary["dropped_groups"] == 2

    # a step that trains: no skip, the run's count still in its line; its summary says nothing was skipped
    mixed = [_record("2:0:t", masked=True, outcome=Outcome.SANDBOX_ERROR),
             _record("2:1:t", masked=False, outcome=Outcome.PASSED)]
    trainable, metrics, note = skipped.trainable(_result(2, mixed, tmp_path / "step_2"), tmp_path / "step_2")
    assert [r.uid for r in trainable] == ["2:1:t"] and metrics == {SKIPPED_STEPS: 1.0} and note == ""
    assert json.loads((tmp_path / "step_2" / "summary.json").read_text())["update_skipped"] is False

    # the checkpoint's extra state carries the count into the resumed run
    resumed = SkippedSteps({"global_step": 2, **skipped.state()})
    _, metrics, _ = resumed.trainable(_result(3, masked, tmp_path / "step_3"), tmp_path / "step_3")
    assert metrics[SKIPPED_STEPS] == 2.0


def test_a_late_trial_keeps_the_skip_in_the_rebuilt_summary(tmp_path: Path) -> None:
    step_dir = tmp_path / "step_4"
    record = _record("4:0:t", masked=True, outcome=Outcome.SANDBOX_ERROR)
    add_trial(step_dir, 4, record, 0.0, 1.0)
    SkippedSteps().trainable(StepResult(step=4, records=[record], summary=summarize(4, [record], 1.0)), step_dir)
    add_trial(step_dir, 4, record.model_copy(update={"session": "late"}), 1.0, 2.0)
    summary = json.loads((step_dir / "summary.json").read_text())
    assert summary["update_skipped"] is True and summary["trials"] == 2
