"""summary.json's per-trial lines (StepSummary.sessions): what the trajectory browser sorts by."""

from __future__ import annotations

from rlkit.rollout.records import Outcome, StepSummary, TrialRecord
from rlkit.rollout.summary import summarize


def test_one_line_per_trial_and_older_summaries_still_read() -> None:
    records = [TrialRecord(uid="1:0:t", task_id="t", session="t__a", outcome=Outcome.PASSED, reward=1.0, masked=False,
                           num_turns=3),
               TrialRecord(uid="1:0:t", task_id="t", session="t__b", outcome=Outcome.PARSE_ERROR, reward=0.0,
                           masked=False, num_turns=2, parse_failures=2)]
    summary = summarize(1, records, 5.0)
    assert [(s.session, s.outcome, s.reward, s.parse_failures) for s in summary.sessions] == [
        ("t__a", Outcome.PASSED, 1.0, 0), ("t__b", Outcome.PARSE_ERROR, 0.0, 2)]
    older = summary.model_dump(mode="json")
    older.pop("sessions")
    assert StepSummary.model_validate(older).sessions == []
