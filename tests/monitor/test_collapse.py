"""The collapse rule (rlkit.monitor.collapse) on each case, and where it shows: rlkit status (text, --json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli.main import main as rlkit
from rlkit.config.paths import RunPaths
from rlkit.monitor import collapse
from rlkit.monitor.collapse import StepPoint, detect
from rlkit.monitor.run import RunRef
from rlkit.monitor.status import collect, render
from tests.monitor.fixtures import collapsing


def _entropy_rise(upto: int = 16) -> list[StepPoint]:
    return [StepPoint(i, r, e, {"passed": r, "failed_tests": 1 - r}, lr=1e-3)
            for i, (r, e) in enumerate(collapsing.ENTROPY_RISE[:upto], 1)]


def _agent_error(upto: int = 12) -> list[StepPoint]:
    out = []
    for i, (passed, errors, paid) in enumerate(collapsing.AGENT_ERROR[:upto], 1):
        t = collapsing.TRIALS
        out.append(StepPoint(i, passed / t, 0.1, {"passed": (passed - paid) / t, "agent_error": errors / t,
                                                  "failed_tests": (t - passed + paid - errors) / t},
                             paid={"agent_error": paid / errors}))
    return out


def _first_flag(points: list[StepPoint]) -> int | None:
    """The first step at which status, read after that step, would name the collapse."""
    return next((points[k - 1].step for k in range(1, len(points) + 1) if detect(points[:k])), None)


def test_falling_reward_with_rising_entropy_is_named_with_its_numbers_and_advice() -> None:
    found = detect(_entropy_rise())
    assert found is not None and found.kind == "entropy_rise" and found.signal == "reward"
    assert found.last_step == 16 and found.first_step <= 9
    assert found.before >= 0.5 and found.after == pytest.approx((0.25 + 0.1875 + 0.1875 + 0.125) / 4)
    assert found.entropy is not None and found.entropy[0] < 0.15 and found.entropy[1] > 0.45
    assert "0.56 → 0.19 (steps 6 → 16)" in found.numbers and "entropy 0.133 → 0.485" in found.numbers
    text = " ".join(found.advice)
    assert "LR=0.00033 or less (actor/lr is 0.001)" in text and "KL_LOSS_COEF" in text
    # named while it happens: a few steps into the fall, not at its end
    assert _first_flag(_entropy_rise()) in range(12, 16)


def test_falling_reward_while_agent_error_takes_over_is_named() -> None:
    found = detect(_agent_error())
    assert found is not None and found.kind == "outcome_takeover" and found.outcome == "agent_error"
    assert found.share is not None and found.share[0] < 0.2 and found.share[1] > 0.95
    assert found.paid is not None and 0.19 <= found.paid <= 0.31  # the reward pays the broken endings
    assert "broken endings" in found.advice[0] and "agent_error" in found.headline
    assert "agent_error" in found.numbers and "still paid reward 1" in found.numbers
    assert _first_flag(_agent_error()) in range(8, 11)


@pytest.mark.parametrize("seed", range(30))
def test_a_healthy_noisy_run_is_never_named(seed: int) -> None:
    """The embedded default's kind of run, judged after every one of 40 steps."""
    pts = [StepPoint(i, r, e, {"passed": r, "failed_tests": 1 - r}) for i, (r, e) in
           enumerate(collapsing.healthy(seed), 1)]
    assert _first_flag(pts) is None


def test_a_run_too_short_to_judge_is_not_named() -> None:
    steep = [StepPoint(i, r, e) for i, (r, e) in enumerate([(0.6, 0.1)] * 4 + [(0.0, 0.9)] * 3, 1)]
    assert detect(steep) is None  # 7 steps: fewer than two stretches of 4
    assert detect(steep + [StepPoint(8, 0.0, 0.9)]) is not None
    assert detect([]) is None


def test_a_fall_alone_or_a_rise_alone_is_not_named() -> None:
    fall = [StepPoint(s, 0.6 if s <= 8 else 0.1, 0.1) for s in range(1, 17)]
    assert detect(fall) is None  # no entropy rise, no takeover
    rise = [StepPoint(s, 0.5, 0.1 if s <= 8 else 0.6) for s in range(1, 17)]
    assert detect(rise) is None  # entropy up, reward steady
    taken = [StepPoint(s, 0.5, 0.1, {"agent_error": 0.1 if s <= 8 else 0.9}) for s in range(1, 17)]
    assert detect(taken) is None  # agent_error took over while the reward held (that is first-step's concern)
    failing = [StepPoint(s, 0.6 if s <= 8 else 0.1, 0.1, {"failed_tests": 0.4 if s <= 8 else 0.9})
               for s in range(1, 17)]
    assert detect(failing) is None  # failed_tests is the plain failure, not a takeover


def test_a_falling_validation_pass_rate_is_named() -> None:
    pts = [StepPoint(0, val_pass1=0.6)]
    pts += [StepPoint(s, 0.5, 0.1 if s <= 5 else 0.4, val_pass1={5: 0.62, 10: 0.2}.get(s)) for s in range(1, 11)]
    found = detect(pts)
    assert found is not None and found.signal == "val/pass@1" and found.kind == "entropy_rise"
    assert (found.first_step, found.last_step, found.before, found.after) == (5, 10, 0.62, 0.2)
    assert "validation pass@1 0.62 → 0.20" in found.numbers


def test_points_from_metric_records_and_summaries() -> None:
    records = [(0, {"val-core/tasks/reward/mean@4": 0.5}),
               (1, {"critic/score/mean": 0.25, "actor/entropy": 0.2, "rollout/trials": 16.0,
                    "rollout/outcome/passed": 4.0, "rollout/outcome/agent_error": 12.0, "actor/lr": 1e-4})]
    summaries = {2: {"trials": 4, "reward_mean": 0.5, "outcomes": {"passed": 2, "call_limit": 2},
                     "sessions": [{"outcome": "call_limit", "reward": 1.0}, {"outcome": "call_limit", "reward": 0}]}}
    p0, p1, p2 = collapse.points(records, summaries)
    assert (p0.step, p0.reward, p0.val_pass1) == (0, None, 0.5)
    assert (p1.reward, p1.entropy, p1.lr, dict(p1.outcomes)) == (0.25, 0.2, 1e-4, {"passed": 0.25, "agent_error": 0.75})
    assert (p2.reward, dict(p2.outcomes), dict(p2.paid)) == (0.5, {"passed": 0.5, "call_limit": 0.5}, {"call_limit": 0.5})


def test_status_names_the_collapse_in_text_and_json(tmp_path: Path, capsys) -> None:
    root = collapsing.write_run(tmp_path, "fx-collapse", "entropy_rise")
    status = collect(RunRef(RunPaths(root, "embedded", "fx-collapse")))
    assert status.collapse is not None and status.collapse.kind == "entropy_rise"
    text = render(status)
    assert "collapse ✗ reward falls while entropy rises" in text
    assert "entropy 0.133 → 0.485" in text and "try: lower the learning rate: LR=0.00033" in text
    assert text.index("collapse ✗") < text.index("first step (step 1)")
    assert rlkit(["status", "fx-collapse", "--root", str(root), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["collapse"]
    assert got["kind"] == "entropy_rise" and got["last_step"] == 16 and got["advice"]


def test_status_names_an_agent_error_takeover_from_the_files(tmp_path: Path) -> None:
    root = collapsing.write_run(tmp_path, "fx-agent-error", "agent_error")
    found = collect(RunRef(RunPaths(root, "embedded", "fx-agent-error"))).collapse
    assert found is not None and found.outcome == "agent_error" and found.paid == pytest.approx((3 / 14 + 5 / 16 + 3 / 16 + 4 / 16) / 4)


def test_status_of_healthy_runs_names_no_collapse(tmp_path: Path, run_copy) -> None:
    root = collapsing.write_run(tmp_path, "fx-fine", "healthy")
    status = collect(RunRef(RunPaths(root, "embedded", "fx-fine")))
    assert status.collapse is None and "collapse" not in render(status)
    assert status.as_dict()["collapse"] is None
    recorded = run_copy("healthy")
    assert collect(RunRef(RunPaths(recorded, "embedded", "fx-healthy"))).collapse is None


def test_dashboard_status_carries_the_collapse(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from rlkit.monitor.dashboard import create_app

    collapsing.write_run(tmp_path, "fx-collapse", "entropy_rise")
    collapsing.write_run(tmp_path, "fx-fine", "healthy")
    client = TestClient(create_app(tmp_path), client=("127.0.0.1", 50000), base_url="http://127.0.0.1:8090")
    got = client.get("/api/runs/fx-collapse/status").json()["collapse"]
    assert got["kind"] == "entropy_rise" and got["headline"] == "collapse: reward falls while entropy rises"
    assert "0.56 → 0.19" in got["numbers"] and any("KL_LOSS_COEF" in tip for tip in got["advice"])
    assert client.get("/api/runs/fx-fine/status").json()["collapse"] is None


def test_the_learning_bench_says_which_runs_status_names(tmp_path: Path) -> None:
    """bench/learning.py --lr-sweep lists, for each run, the collapse rlkit status names (the x10 run should be)."""
    from tests.fixtures.scripts import load_script

    learning = load_script("bench/learning.py")
    collapsing.write_run(tmp_path / "runs", "rl-s0", "healthy")
    collapsing.write_run(tmp_path / "runs", "rl-x10-s0", "entropy_rise")
    report: dict = {}
    lines = learning.collapse_lines(tmp_path, ["rl-s0", "rl-x10-s0"], report)
    assert "- rl-s0: none" in lines
    assert any(line.startswith("- rl-x10-s0: reward falls while entropy rises: 4-step mean reward 0.56 → 0.19")
               for line in lines)
    assert report["collapse"]["rl-s0"] is None and report["collapse"]["rl-x10-s0"]["kind"] == "entropy_rise"


def test_points_leave_out_what_a_hostile_summary_says() -> None:
    """Outcome names that rollout.summary never writes (escapes, a megabyte of text) and values that are not
    finite counts are left out; a summary whose fields have the wrong types gives an empty point."""
    summaries = {1: {"trials": True, "reward_mean": float("nan"), "sessions": 5,
                     "outcomes": {"\x1b[2J": 9, "x" * 100_000: 9, "agent_error": float("inf"), "passed": 4}},
                 2: {"trials": "16", "outcomes": [1, 2], "sessions": [{"outcome": "\x1b]0;", "reward": 1}, "s"]}}
    p1, p2 = collapse.points([], summaries)
    assert (p1.reward, dict(p1.outcomes), dict(p1.paid)) == (None, {"passed": 1.0}, {})
    assert (p2.reward, dict(p2.outcomes), dict(p2.paid)) == (None, {}, {})
