"""A verl step's summary.json, built one trial at a time by several agent-loop worker processes."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord
from rlkit.rollout.step_file import add_trial

SEGMENT = TokenSegment(prompt_ids=[1, 2], response_ids=[3, 4], response_mask=[1, 1], response_logprobs=[-0.1, -0.2])


def _record(uid: str, session: str, outcome: Outcome, reward: float) -> TrialRecord:
    masked = outcome.masked
    return TrialRecord(uid=uid, task_id=uid.split(":")[-1], session=session, outcome=outcome, reward=reward,
                       masked=masked, segments=[] if masked else [SEGMENT], num_turns=2,
                       timings={"sandbox": 1.0, "agent": 2.0, "verifier": 0.5, "model": 1.5})


def _worker(step_dir: str, worker: int) -> None:
    for i in range(10):
        outcome = Outcome.PASSED if (worker + i) % 2 else Outcome.FAILED_TESTS
        add_trial(Path(step_dir), 1, _record(f"1:{i % 4}:task{i % 4}", f"w{worker}-{i}", outcome,
                                             1.0 if outcome is Outcome.PASSED else 0.0), 100.0 + i, 110.0 + i)


def test_workers_in_several_processes_file_every_trial_of_a_step(tmp_path: Path) -> None:
    step_dir = tmp_path / "exp" / "step_1"
    procs = [multiprocessing.get_context("spawn").Process(target=_worker, args=(str(step_dir), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    summary = json.loads((step_dir / "summary.json").read_text())
    assert summary["step"] == 1 and summary["trials"] == 30 and len(summary["sessions"]) == 30
    assert summary["outcomes"]["passed"] == 15 and summary["outcomes"]["failed_tests"] == 15
    assert summary["pass_rate"] == 0.5 and summary["timing_s"]["wall"] == 19.0  # first start to last end
    assert summary["timing_s"]["agent"] == 60.0


def test_a_group_whose_trials_are_all_masked_is_counted_dropped(tmp_path: Path) -> None:
    step_dir = tmp_path / "step_2"
    add_trial(step_dir, 2, _record("2:0:a", "s1", Outcome.SANDBOX_ERROR, 0.0), 0.0, 5.0)
    add_trial(step_dir, 2, _record("2:0:a", "s2", Outcome.VERIFIER_TIMEOUT, 0.0), 1.0, 6.0)
    summary = add_trial(step_dir, 2, _record("2:1:b", "s3", Outcome.PASSED, 1.0), 2.0, 9.0)
    assert (summary.trials, summary.masked, summary.dropped_groups) == (3, 2, 1)
    assert summary.reward_mean == 1.0 and summary.timing_s["wall"] == 9.0
    assert [p.name for p in step_dir.iterdir() if not p.name.startswith(".")] == ["summary.json"]
