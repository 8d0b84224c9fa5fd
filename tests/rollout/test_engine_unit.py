"""Engine logic that needs no docker: outcome precedence, step summary, specs, pass files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlkit.rollout.engine import EngineConfig, RolloutEngine, retryable, trial_timings, with_tag
from rlkit.rollout.passes import (
    AttemptResult,
    difficulty_filter,
    read_results,
    run_pass,
    tally,
    with_pass_rates,
)
from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord
from rlkit.rollout.summary import classify, summarize, write_summary
from rlkit.tasks.index import IndexRow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
O = Outcome


@pytest.mark.parametrize("trial_reason, reward, record, expected", [
    (O.PASSED, 1.0, {"reasons": []}, O.PASSED),
    (O.FAILED_TESTS, 0.0, None, O.FAILED_TESTS),
    # the budget refusal makes the agent error out: the truncation is the reason, still graded
    (O.AGENT_ERROR, 0.0, {"reasons": ["call_limit"]}, O.CALL_LIMIT),
    (O.PASSED, 1.0, {"reasons": ["response_budget"]}, O.RESPONSE_BUDGET),
    (O.FAILED_TESTS, 0.0, {"reasons": ["call_limit", "context_exceeded"]}, O.CONTEXT_EXCEEDED),
    (O.FAILED_TESTS, 0.0, {"parse_failures": 2}, O.PARSE_ERROR),
    (O.PASSED, 1.0, {"parse_failures": 2}, O.PASSED),           # a pass is a pass
    (O.AGENT_ERROR, 0.0, {"parse_failures": 1}, O.PARSE_ERROR),
    (O.AGENT_ERROR, 1.0, {}, O.AGENT_ERROR),
    (O.AGENT_TIMEOUT, 0.0, {"parse_failures": 1}, O.AGENT_TIMEOUT),
    # the trial runner's own verdicts win over the proxy's record
    (O.SANDBOX_ERROR, 0.0, {"reasons": ["call_limit"]}, O.SANDBOX_ERROR),
    (O.NO_REWARD_FILE, 0.0, {"reasons": ["call_limit"]}, O.NO_REWARD_FILE),
    (O.VERIFIER_TIMEOUT, 0.0, {}, O.VERIFIER_TIMEOUT),
    (O.TAMPER_SUSPECT, 1.0, {}, O.TAMPER_SUSPECT),
    (O.ERROR, 0.0, {}, O.ERROR),
])
def test_one_outcome_per_trial(trial_reason, reward, record, expected):
    assert classify(trial_reason, reward, record) is expected


def _record(uid: str, outcome: Outcome, reward: float = 0.0, tokens: bool = True, **kw) -> TrialRecord:
    segments = [TokenSegment(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[-0.1],
                             num_turns=1)] if tokens else []
    return TrialRecord(uid=uid, task_id=uid.split(":")[-1], session=f"s-{uid}-{outcome}", outcome=outcome,
                       reward=reward, masked=outcome.masked or not tokens, segments=segments, **kw)


def test_summary_counts_masks_truncations_and_dropped_groups(tmp_path: Path):
    records = [
        _record("0:0:a", O.PASSED, 1.0, timings={"sandbox": 1, "agent": 2, "verifier": 1, "model": 4}),
        _record("0:0:a", O.CALL_LIMIT, 0.0, num_breaks=1, parse_failures=2),
        _record("0:1:b", O.SANDBOX_ERROR),
        _record("0:1:b", O.SANDBOX_ERROR),      # both of b masked: the group is dropped
        _record("0:2:c", O.RESPONSE_BUDGET, 1.0),
    ]
    summary = summarize(0, records, wall_s=12.5)
    assert summary.trials == 5 and summary.masked == 2 and summary.truncated == 2
    assert summary.outcomes["sandbox_error"] == 2 and summary.outcomes["passed"] == 1
    assert set(summary.outcomes) == {o.value for o in Outcome}
    assert summary.reward_mean == pytest.approx(2 / 3) and summary.pass_rate == pytest.approx(2 / 3)
    assert summary.dropped_groups == 1
    assert (summary.parse_failures, summary.num_breaks) == (2, 1)
    assert summary.timing_s == {"sandbox": 1, "agent": 2, "verifier": 1, "model": 4, "wall": 12.5}
    assert summary.timing_share == {"sandbox": 0.125, "agent": 0.25, "verifier": 0.125, "model": 0.5}
    path = write_summary(tmp_path / "step_0", summary)
    assert json.loads(path.read_text())["dropped_groups"] == 1


def test_timings_and_retry_policy():
    harbor = {"environment_setup": 2.0, "agent_setup": 0.5, "agent_execution": 3.0, "verifier": 1.0, "total": 7.0}
    record = {"calls": [{"latency_s": 0.25}, {"latency_s": 0.5}]}
    # the model's time is taken out of the agent's: the four parts add up
    assert trial_timings(harbor, record) == {"sandbox": 2.0, "agent": 2.75, "verifier": 1.0, "model": 0.75,
                                             "total": 7.0}
    assert retryable("SandboxError") and not retryable("ImageError")
    assert retryable("EnvironmentStartTimeoutError")   # harbor's own start timeout
    assert with_tag("rlkit-task/x:latest", "cc") == "rlkit-task/x:cc"
    assert with_tag("reg:5000/rlkit-task/x", "cc") == "reg:5000/rlkit-task/x:cc"


def _row(task: str, image: str | None = None) -> IndexRow:
    return IndexRow(task_id=task, task_source=str(EXAMPLES / task), image=image or f"rlkit-task/{task}:latest",
                    split="train")


def test_trial_spec_of_model_and_reference_agents(tmp_path: Path):
    with pytest.raises(Exception, match="proxy URL"):
        RolloutEngine(EngineConfig(agent="model"))
    engine = RolloutEngine(EngineConfig(model_name="tiny", proxy_url="http://127.0.0.1:9", trials_root=tmp_path,
                                        project="p", experiment="e", agent_timeout_sec=30, max_turns=3))
    spec = engine.trial_spec(_row("merge-intervals"), "sess-1", step=2)
    assert spec.step_dir() == tmp_path / "p" / "e" / "step_2" and spec.session == "sess-1"
    assert spec.environment_kwargs["image"] == "rlkit-task/merge-intervals:latest"
    assert spec.agent["kwargs"]["api_base"] == "http://127.0.0.1:9/s/sess-1/v1"
    assert spec.agent["kwargs"]["max_turns"] == 3 and spec.agent_timeout_sec == 30
    oracle = RolloutEngine(EngineConfig(agent="oracle", trials_root=tmp_path))
    spec = oracle.trial_spec(_row("merge-intervals"), "s", step=0)
    assert (spec.agent, spec.backend) == ("oracle", "docker")


class _Engine:
    """Stand-in engine: task 'a' passes every other attempt, 'b' always fails on its sandbox."""

    def __init__(self, root: Path) -> None:
        self.config = EngineConfig(agent="oracle", trials_root=root)
        self.calls = 0
        self.attempts: list[tuple[str, int | None]] = []

    async def run_trial(self, row: IndexRow, *, uid: str, step: int, attempt: int | None = None) -> TrialRecord:
        self.calls += 1
        self.attempts.append((row.task_id, attempt))
        if row.task_id == "median-even-length":
            return _record(uid, O.SANDBOX_ERROR, tokens=False)
        return _record(uid, O.PASSED if self.calls % 2 else O.FAILED_TESTS, float(self.calls % 2))


def test_pass_resumes_from_its_results_file(tmp_path: Path):
    rows = [_row("merge-intervals"), _row("median-even-length")]
    results = tmp_path / "results.jsonl"
    results.write_text(AttemptResult(task_id="merge-intervals", session="old", outcome=O.PASSED,
                                     reward=1.0).model_dump_json() + "\n" + '{"task_id": "torn')
    engine = _Engine(tmp_path)
    tallies = asyncio.run(run_pass(engine, rows, 3, results))
    assert engine.calls == 5  # 2 left for the first task, 3 for the second
    # a resumed pass numbers its attempts after the recorded one (the numbers seed a seeded pass)
    assert sorted(engine.attempts) == [("median-even-length", 0), ("median-even-length", 1),
                                       ("median-even-length", 2), ("merge-intervals", 1), ("merge-intervals", 2)]
    assert len(read_results(results)) == 6
    assert (tallies["merge-intervals"].attempts, tallies["merge-intervals"].graded) == (3, 3)
    assert tallies["median-even-length"].pass_rate is None  # every attempt masked
    again = _Engine(tmp_path)
    asyncio.run(run_pass(again, rows, 3, results))
    assert again.calls == 0
    assert (tmp_path / "default" / "default" / "step_0" / "summary.json").is_file()


def test_pass_rates_and_difficulty_filter():
    rows = [_row("merge-intervals"), _row("median-even-length"), _row("word-frequency")]
    results = [AttemptResult(task_id=t, session=str(i), outcome=O.PASSED if r else O.FAILED_TESTS, reward=r)
               for i, (t, r) in enumerate([("merge-intervals", 1.0), ("merge-intervals", 0.0),
                                           ("median-even-length", 1.0), ("word-frequency", 0.0)])]
    rated = with_pass_rates(rows, tally(rows, results))
    assert [r.pass_rate for r in rated] == [0.5, 1.0, 0.0]
    assert [r.task_id for r in difficulty_filter(rated)] == ["merge-intervals"]
    assert [r.task_id for r in difficulty_filter(rated, 0.5, 1.0, inclusive=True)] == ["merge-intervals",
                                                                                       "median-even-length"]


@pytest.mark.parametrize("policy, masked", [("zero", False), ("mask", True)])
def test_tamper_suspect_gets_no_reward_and_follows_the_tamper_policy(tmp_path: Path, policy: str, masked: bool):
    from rlkit.rollout.trial import TrialOutcome

    engine = RolloutEngine(EngineConfig(agent="oracle", trials_root=tmp_path, tamper_policy=policy))
    outcome = TrialOutcome(task_id="merge-intervals", session="s", reward=1.0, reason=O.TAMPER_SUSPECT)
    segment = {"prompt_ids": [1], "response_ids": [2], "response_mask": [1], "response_logprobs": [-0.1]}
    record = engine._record(_row("merge-intervals"), "0:0:a", outcome, {"segments": [segment]}, attempts=1)
    assert (record.outcome, record.reward, record.masked) == (O.TAMPER_SUSPECT, 0.0, masked)


@pytest.mark.parametrize("reason, masked", [
    (O.VERIFIER_TIMEOUT, True), (O.NO_REWARD_FILE, True), (O.VERIFIER_ERROR, True), (O.SANDBOX_ERROR, True),
    (O.AGENT_TIMEOUT, False), (O.AGENT_ERROR, False), (O.FAILED_TESTS, False),
])
def test_the_infrastructures_faults_are_masked_and_the_agents_trained(tmp_path: Path, reason: O, masked: bool):
    """records.py's fault table: a verifier timeout (a loaded machine) or a missing reward file
    trains nothing; the agent's own failures train with the tests' reward (0 here)."""
    from rlkit.rollout.trial import TrialOutcome

    engine = RolloutEngine(EngineConfig(agent="oracle", trials_root=tmp_path))
    outcome = TrialOutcome(task_id="merge-intervals", session="s", reward=0.0, reason=reason)
    segment = {"prompt_ids": [1], "response_ids": [2], "response_mask": [1], "response_logprobs": [-0.1]}
    record = engine._record(_row("merge-intervals"), "0:0:a", outcome, {"segments": [segment]}, attempts=1)
    assert (record.outcome, record.masked, record.trainable) == (reason, masked, not masked)
    summary = summarize(0, [record], 1.0)
    assert summary.outcomes[reason.value] == 1 and summary.masked == int(masked)


def test_a_seeded_pass_posts_the_same_seed_for_the_same_task_and_attempt(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """Validation pairs its passes: attempt j of task t samples with the same seed at every step
    (and the proxy derives a distinct seed per call from it); another SEED gives other seeds."""
    from rlkit.rollout import trial
    from rlkit.rollout.engine import attempt_seed
    from rlkit.rollout.trial import TrialOutcome

    async def no_trial(spec):  # unit test: the sandbox and the agent are not the point
        return TrialOutcome(task_id="merge-intervals", session=spec.session, reward=0.0, reason=O.FAILED_TESTS)

    monkeypatch.setattr(trial, "run_trial", no_trial)
    posted: list[dict] = []

    class Recording(RolloutEngine):
        async def _proxy_post(self, session, what, body, query=""):
            if what == "sampling":
                posted.append(dict(body))

    engine = Recording(EngineConfig(model_name="tiny", proxy_url="http://127.0.0.1:9", trials_root=tmp_path,
                                    seed=7, max_attempts=1))
    first = asyncio.run(engine.run_trial(_row("merge-intervals"), uid="0:0:m", step=0, attempt=3))
    again = asyncio.run(engine.run_trial(_row("merge-intervals"), uid="8:0:m", step=8, attempt=3))
    assert posted == [{"seed": attempt_seed(7, "merge-intervals", 3)}] * 2
    # the record and the step's summary say which attempt it was: a reader pairs passes by it
    assert first.attempt == again.attempt == 3
    assert summarize(0, [first], 1.0).sessions[0].attempt == 3
    unseeded = Recording(EngineConfig(model_name="tiny", proxy_url="http://127.0.0.1:9", trials_root=tmp_path,
                                      max_attempts=1))
    assert asyncio.run(unseeded.run_trial(_row("merge-intervals"), uid="1:0:m", step=1, attempt=3)).attempt is None
    assert attempt_seed(7, "merge-intervals", 3) != attempt_seed(8, "merge-intervals", 3)
    assert attempt_seed(7, "merge-intervals", 3) != attempt_seed(7, "merge-intervals", 4)


@pytest.mark.parametrize("reason, policy, reward", [
    (O.AGENT_ERROR, "zero", 0.0), (O.AGENT_ERROR, "tests", 1.0), (O.AGENT_TIMEOUT, "zero", 1.0),
    (O.PASSED, "zero", 1.0),
])
def test_a_trial_that_broke_its_scaffolds_protocol_earns_what_broken_protocol_reward_says(
        tmp_path: Path, reason: O, policy: str, reward: float):
    """A trial that applied the fix and then wrote answers Terminus could not parse ends `agent_error`
    with its tests passing: BROKEN_PROTOCOL_REWARD=zero pays it nothing (trained, not masked)."""
    from rlkit.rollout.trial import TrialOutcome

    engine = RolloutEngine(EngineConfig(agent="oracle", trials_root=tmp_path, broken_protocol_reward=policy))
    outcome = TrialOutcome(task_id="merge-intervals", session="s", reward=1.0, reason=reason)
    segment = {"prompt_ids": [1], "response_ids": [2], "response_mask": [1], "response_logprobs": [-0.1]}
    record = engine._record(_row("merge-intervals"), "0:0:a", outcome, {"segments": [segment]}, attempts=1)
    assert (record.outcome, record.reward, record.masked) == (reason, reward, False)
