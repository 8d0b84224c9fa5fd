"""The proxy's session record as the trial's ATIF trajectory (harbor's models)."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.scaffolds.atif import record_to_trajectory, write_token_trajectory

RECORD = {
    "session_id": "trial-3",
    "num_calls": 2,
    "num_segments": 1,
    "num_breaks": 0,
    "parse_failures": 1,
    "segments": [{"prompt_ids": [1, 2], "response_ids": [3, 4, 9, 5], "response_mask": [1, 1, 0, 1]}],
    "calls": [
        {"index": 0, "parent": None, "prompt_ids": [1, 2], "completion_ids": [3, 4], "logprobs": [-0.5, -1.25],
         "finish_reason": "tool_calls", "parse_failure": False, "latency_s": 0.01,
         "tool_calls": [{"id": "call_a", "name": "bash", "arguments": "{\"command\": \"ls\"}"}]},
        {"index": 1, "parent": 0, "prompt_ids": [1, 2, 3, 4, 9], "completion_ids": [5], "logprobs": [-0.1],
         "finish_reason": "stop", "parse_failure": True, "latency_s": 0.02, "tool_calls": []},
    ],
}


def test_one_agent_step_per_call_with_exact_ids() -> None:
    from harbor.models.trajectories import Trajectory

    trajectory = record_to_trajectory(RECORD, scaffold="oc", model_name="rlkit/tiny", agent_version="1.0")
    assert trajectory is not None
    again = Trajectory.model_validate_json(trajectory.model_dump_json())  # valid ATIF
    steps = again.steps
    assert [s.source for s in steps] == ["agent", "agent"]
    assert [s.metrics.prompt_token_ids for s in steps] == [[1, 2], [1, 2, 3, 4, 9]]
    assert [s.metrics.completion_token_ids for s in steps] == [[3, 4], [5]]
    assert [s.metrics.logprobs for s in steps] == [[-0.5, -1.25], [-0.1]]
    call = steps[0].tool_calls[0]
    assert (call.tool_call_id, call.function_name, call.arguments) == ("call_a", "bash", {"command": "ls"})
    assert steps[1].extra["parse_failure"] is True
    assert again.final_metrics.total_completion_tokens == 3
    assert again.session_id == "trial-3" and again.agent.name == "rlkit-oc"
    assert again.extra["proxy"]["num_segments"] == 1 and "segments" not in again.extra["proxy"]


def test_no_calls_gives_no_trajectory(tmp_path: Path) -> None:
    empty = {"session_id": "s", "calls": []}
    assert record_to_trajectory(empty, scaffold="cc", model_name=None) is None
    assert write_token_trajectory(tmp_path, empty, scaffold="cc", model_name=None) is None
    assert not (tmp_path / "trajectory.json").exists()


def test_agents_own_trajectory_is_kept_aside_once(tmp_path: Path) -> None:
    native = {"schema_version": "ATIF-v1.6", "steps": [{"source": "user", "message": "native"}]}
    (tmp_path / "trajectory.json").write_text(json.dumps(native))
    for _ in range(2):  # after the run and again after harbor's log sync: native must survive
        write_token_trajectory(tmp_path, RECORD, scaffold="ohsdk", model_name="openai/tiny")
    assert json.loads((tmp_path / "trajectory.ohsdk.json").read_text()) == native
    written = json.loads((tmp_path / "trajectory.json").read_text())
    assert written["steps"][0] == {"step_id": 1, "source": "user", "message": "native"}  # its first user message
    assert written["steps"][1]["metrics"]["completion_token_ids"] == [3, 4]


def test_the_trajectory_shows_the_instruction_and_what_came_back(tmp_path: Path) -> None:
    """The instruction first, then each call with the agent's own observation of it (matched in order);
    a result naming a tool call the token step has keeps that link."""
    from harbor.models.trajectories import Trajectory

    own = {"schema_version": "ATIF-v1.6", "steps": [
        {"step_id": 1, "source": "user", "message": "the agent's whole first prompt"},
        {"step_id": 2, "source": "agent", "message": "ran ls", "observation": {"results": [
            {"source_call_id": "call_a", "content": "README.md\nsrc\n"}]}},
        {"step_id": 3, "source": "agent", "message": "done", "observation": {"results": [
            {"source_call_id": "call_9_task_complete", "content": "$ "}]}}]}
    (tmp_path / "trajectory.json").write_text(json.dumps(own))
    write_token_trajectory(tmp_path, RECORD, scaffold="terminus", model_name="m", instruction="Fix the parser.")
    written = Trajectory.model_validate_json((tmp_path / "trajectory.json").read_text())  # valid ATIF
    user, first, second = written.steps
    assert (user.source, user.message) == ("user", "Fix the parser.")
    assert [r.content for r in first.observation.results] == ["README.md\nsrc\n"]
    assert first.observation.results[0].source_call_id == "call_a"  # the token step's own tool call
    assert second.observation.results[0].source_call_id is None and second.observation.results[0].content == "$ "
    assert second.metrics.completion_token_ids == [5] and written.final_metrics.total_steps == 2


def test_rollout_details_filled_from_the_record_unless_the_agent_did() -> None:
    from harbor.models.agent.context import AgentContext

    from rlkit.scaffolds._agents import fill_rollout_details

    context = AgentContext()
    fill_rollout_details(context, RECORD)
    [details] = context.rollout_details
    assert details["completion_token_ids"] == [[3, 4], [5]]
    assert details["prompt_token_ids"] == [[1, 2], [1, 2, 3, 4, 9]]
    assert (context.n_input_tokens, context.n_output_tokens) == (7, 3)
    own = AgentContext(rollout_details=[{"completion_token_ids": [[8]]}])
    fill_rollout_details(own, RECORD)
    assert own.rollout_details == [{"completion_token_ids": [[8]]}]
