"""A step's trials reduced to `step_<N>/summary.json`, and each trial's one outcome.

Pure functions, no I/O besides `write_summary`: the engine calls them, and their unit
tests pin the outcome precedence and the counting rules of `rlkit.rollout.records`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.rollout.records import Outcome, StepSummary, TrialBrief, TrialRecord

SUMMARY_FILE = "summary.json"
TIMING_KEYS = ("sandbox", "agent", "verifier", "model")
# The proxy's session reasons that end an episode early, in the order they win.
_TRUNCATION_REASONS = (Outcome.CONTEXT_EXCEEDED, Outcome.CALL_LIMIT, Outcome.RESPONSE_BUDGET)
# What the trial runner decides alone, whatever the proxy saw: the grade never came, or
# the infrastructure or the verifier's tamper check overrules it.
_TRIAL_DECIDES = frozenset({Outcome.SANDBOX_ERROR, Outcome.VERIFIER_ERROR, Outcome.ERROR, Outcome.TAMPER_SUSPECT,
                            Outcome.TESTS_MISSING,
                            Outcome.NO_REWARD_FILE, Outcome.VERIFIER_TIMEOUT})


def classify(trial_reason: Outcome, reward: float, record: dict[str, Any] | None) -> Outcome:
    """One outcome from the trial runner's reason and the proxy's session record.

    Precedence: infrastructure, tamper and grading failures (the trial runner's) >
    truncations the proxy recorded (call_limit, response_budget, context_exceeded: the
    agent usually errors out on the refused call, so they beat agent_error) > agent
    timeout > parse_error (a trial that did not pass and whose tool calls the proxy
    could not parse) > agent_error > passed / failed_tests."""
    if trial_reason in _TRIAL_DECIDES:
        return trial_reason
    reasons = set((record or {}).get("reasons") or ())
    for truncation in _TRUNCATION_REASONS:
        if truncation.value in reasons:
            return truncation
    if trial_reason is Outcome.AGENT_TIMEOUT:
        return trial_reason
    if reward <= 0 and int((record or {}).get("parse_failures") or 0) > 0:
        return Outcome.PARSE_ERROR
    if trial_reason is Outcome.AGENT_ERROR:
        return trial_reason
    return Outcome.PASSED if reward > 0 else Outcome.FAILED_TESTS


def summarize(step: int, records: Sequence[TrialRecord], wall_s: float) -> StepSummary:
    """Counts, reward mean, pass rate and timing shares of one step."""
    outcomes = {o.value: 0 for o in Outcome}
    for r in records:
        outcomes[r.outcome.value] += 1
    graded = [r for r in records if not r.outcome.masked]
    groups: dict[str, bool] = {}
    for r in records:
        groups[r.uid] = groups.get(r.uid, False) or r.trainable
    timing = {key: round(sum(r.timings.get(key, 0.0) for r in records), 3) for key in TIMING_KEYS}
    spent = sum(timing.values())
    return StepSummary(
        step=step, trials=len(records), outcomes=outcomes,
        reward_mean=sum(r.reward for r in graded) / len(graded) if graded else 0.0,
        pass_rate=sum(r.reward >= 1.0 for r in graded) / len(graded) if graded else 0.0,
        masked=sum(r.masked for r in records), truncated=sum(r.outcome.truncated for r in records),
        dropped_groups=sum(not trainable for trainable in groups.values()),
        parse_failures=sum(r.parse_failures for r in records), num_breaks=sum(r.num_breaks for r in records),
        timing_s={**timing, "wall": round(wall_s, 3)},
        timing_share={key: round(value / spent, 4) if spent else 0.0 for key, value in timing.items()},
        sessions=[TrialBrief(session=r.session, task_id=r.task_id, outcome=r.outcome, reward=r.reward, masked=r.masked,
                             num_turns=r.num_turns, parse_failures=r.parse_failures, attempt=r.attempt)
                  for r in records],
    )


def write_summary(step_dir: Path, summary: StepSummary) -> Path:
    """`step_<N>/summary.json`, replaced atomically (status may read it at any time)."""
    step_dir.mkdir(parents=True, exist_ok=True)
    target = step_dir / SUMMARY_FILE
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(summary.model_dump_json(indent=2))
    tmp.replace(target)
    return target
