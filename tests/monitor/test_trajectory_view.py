"""The trajectory view's data: the instruction, each turn rendered (what the agent sent, what came back),
from the trial's own files; and one rule for "passed" in every table."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.monitor import trials
from rlkit.monitor.dashboard import steps_overview
from rlkit.monitor.trajectory import render_message

STEP, SESSION = 2, "roman-numerals-parse__fc81e6ca"


def _trial(root: Path) -> Path:
    return root / "harbor_trials" / "embedded" / "fx-healthy" / f"step_{STEP}" / SESSION


def test_a_terminus_reply_is_rendered_not_escaped() -> None:
    reply = json.dumps({"analysis": "The bug is in the code.", "plan": "Apply the fix.",
                        "commands": [{"keystrokes": "cd /app\ngit apply <<'PATCH'\n--- a/x.py\n", "duration": 1}],
                        "task_complete": False})
    blocks = render_message(reply)
    assert [(b["kind"], b["label"]) for b in blocks] == [("field", "analysis"), ("field", "plan"),
                                                         ("command", "keystrokes")]
    assert blocks[2]["text"] == "cd /app\ngit apply <<'PATCH'\n--- a/x.py\n" and "\\n" not in blocks[2]["text"]
    assert render_message("not json {") == [{"kind": "text", "label": "", "text": "not json {"}]
    cut = render_message('{"analysis": "x", "commands": [{"keystrokes": "cd /app\\ngit ap')  # the token budget ran out
    assert cut[1] == {"kind": "command", "label": "keystrokes", "text": "cd /app\ngit ap … (cut off)"}
    assert cut[-1]["kind"] == "note"


def test_an_older_trial_gets_its_observations_from_the_agents_own_trajectory(run_copy) -> None:
    root = run_copy("healthy")
    trial = _trial(root)
    token = json.loads((trial / "agent" / "trajectory.json").read_text())
    calls = len(token["steps"])
    own = {"steps": [{"step_id": 1, "source": "user", "message": "Task: parse roman numerals"}] + [
        {"step_id": i + 2, "source": "agent", "message": f"episode {i}",
         "observation": {"results": [{"content": f"root@box:/app# output of episode {i}"}]}} for i in range(calls)]}
    (trial / "agent" / "trajectory.terminus.json").write_text(json.dumps(own))
    detail = trials.trial_detail(root / "harbor_trials" / "embedded" / "fx-healthy", STEP, SESSION)
    assert detail["instruction"] == "Task: parse roman numerals"
    assert len(detail["turns"]) == calls and "matched to the calls in order" in detail["observations_from"]
    first = detail["turns"][0]
    assert first["observations"] == ["root@box:/app# output of episode 0"]
    assert [b["label"] for b in first["sent"]][:2] == ["analysis", "plan"]
    assert any(b["kind"] == "command" and "\n" in b["text"] for b in first["sent"])


def test_a_trial_written_now_carries_its_instruction_and_observations(tmp_path: Path) -> None:
    from rlkit.scaffolds.atif import write_token_trajectory

    trial = tmp_path / "harbor_trials" / "p" / "e" / "step_1" / "t__1"
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_text(json.dumps({"steps": [
        {"step_id": 1, "source": "user", "message": "full prompt"},
        {"step_id": 2, "source": "agent", "message": "m", "observation": {"results": [{"content": "ls output"}]}}]}))
    record = {"session_id": "t__1", "calls": [{"prompt_ids": [1], "completion_ids": [2], "logprobs": [-0.1],
                                               "content": '{"commands": [{"keystrokes": "ls\\n"}]}'}]}
    write_token_trajectory(trial / "agent", record, scaffold="terminus", model_name="m", instruction="Fix it.")
    detail = trials.trial_detail(tmp_path / "harbor_trials" / "p" / "e", 1, "t__1")
    assert detail["instruction"] == "Fix it." and detail["observations_from"] == "trajectory.json"
    [turn] = detail["turns"]
    assert turn["sent"] == [{"kind": "command", "label": "keystrokes", "text": "ls\n"}]
    assert turn["observations"] == ["ls output"]


def test_passed_is_counted_by_one_rule_in_every_table(run_copy) -> None:
    """A trial that ran out of response tokens after its fix passed the tests: outcome response_budget,
    reward 1. It counts as passed in the steps table, the trial list and the pass rate alike."""
    root = run_copy("healthy")
    step_dir = root / "harbor_trials" / "embedded" / "fx-healthy" / "step_2"
    summary = json.loads((step_dir / "summary.json").read_text())
    for s in summary["sessions"]:
        s["reward"] = 1.0  # the response_budget trial passed its tests too
    summary["pass_rate"], summary["reward_mean"] = 1.0, 1.0
    (step_dir / "summary.json").write_text(json.dumps(summary))
    rows = trials.list_trials(step_dir.parent, 2)
    assert {r["outcome"] for r in rows} == {"passed", "response_budget"} and all(r["passed"] for r in rows)
    [step2] = [s for s in steps_overview(RunPaths(root, "embedded", "fx-healthy")) if s["step"] == 2]
    assert (step2["passed"], step2["graded"], step2["pass_rate"]) == (2, 2, 1.0)
    assert step2["outcomes"]["passed"] == 1  # the outcome says why it ended; "passed" is the reward rule


def test_a_recorded_restarted_run_reads_as_its_latest_attempt(run_copy) -> None:
    """Fixture `stopped`: the embedded run stopped by SIGINT in step 2 and resumed from step 1. Status (with no
    config: N from the attempt marker) says finished 3/3 on attempt 2; step 1's response_budget trial with
    reward 1 is passed in the steps table as in the pass rate; its failed trial shows what the agent saw."""
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect

    root = run_copy("stopped")
    status = collect(locate("fx-stopped", root))
    assert (status.live.state, status.last_step, status.ref.total_steps) == ("finished", 3, 3)
    assert status.attempt.attempt == 2 and status.attempt.from_step == 1
    paths = RunPaths(root, "i27", "fx-stopped")
    step1 = next(s for s in steps_overview(paths) if s["step"] == 1)
    assert (step1["passed"], step1["graded"], step1["pass_rate"]) == (2, 4, 0.5)
    assert step1["outcomes"]["passed"] == 1 and step1["outcomes"]["response_budget"] == 1
    detail = trials.trial_detail(paths.trials, 1, "roman-numerals-parse__b2a54048")
    assert detail["row"]["outcome"] == "failed_tests" and not detail["row"]["passed"]
    assert detail["instruction"].startswith("# numerals: implement from_roman")
    assert detail["observations_from"] == "trajectory.json"
    assert "Applied patch numerals/roman.py cleanly." in detail["turns"][0]["observations"][0]
    assert "NameError" in detail["test_stdout"]
