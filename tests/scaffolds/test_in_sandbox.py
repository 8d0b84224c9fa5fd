"""Real agent CLIs inside real docker sandboxes, through the real proxy and real vLLM.

Every agent runs a whole trial through rlkit's trial runner (harbor's Trial on the
docker backend). Each in-container agent (Claude Code, OpenCode, OpenHands SDK) runs
from its image's tree mounted read-only into the plain task image (cc also baked into a
layer, AGENT_DELIVERY=bake) and reaches the proxy on the host's loopback (network
mode host). The policy (forced by a regex, in its own qwen3_coder syntax) calls the
agent's shell tool; the agent must run it in the sandbox and send its output back in
the next request. The proxy's session must hold the token ids and logprobs of every
call as one segment, and the ATIF trajectory and result.json must carry exactly those
ids. Terminus-2 drives tmux in the sandbox from the host.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.scaffolds.conftest import TASK_DIR, ProxyStack

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow]

# A plain-text answer ends an agent's turn at once; forcing it keeps each run short
# and deterministic (the random tiny model would otherwise ramble to the token cap).
FINAL_ANSWER = {"structured_outputs": {"regex": "I have looked at the task[.]"}, "temperature": 0.0}


def _assert_token_record(record: dict) -> list[dict]:
    calls = record["calls"]
    assert record["num_calls"] >= 1 and calls, "the agent made no request through the proxy"
    # One trainable sequence: no side calls (titles, summaries) broke the token record.
    assert (record["num_segments"], record["num_breaks"]) == (1, 0), record
    for call in calls:
        assert call["prompt_ids"], "a call without prompt ids"
        assert call["completion_ids"], "a call without completion ids"
        assert len(call["logprobs"]) == len(call["completion_ids"])
        assert all(lp <= 0.0 for lp in call["logprobs"])
    return calls


def _assert_trajectory_matches(agent_dir: Path, calls: list[dict]) -> None:
    trajectory = json.loads((agent_dir / "trajectory.json").read_text())
    agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert [s["metrics"]["completion_token_ids"] for s in agent_steps] == [c["completion_ids"] for c in calls]
    assert [s["metrics"]["prompt_token_ids"] for s in agent_steps] == [c["prompt_ids"] for c in calls]
    assert [s["metrics"]["logprobs"] for s in agent_steps] == [c["logprobs"] for c in calls]


def _assert_result_rollout_details(trial_dir: Path, calls: list[dict]) -> None:
    """harbor's own record of the ids (result.json agent_result.rollout_details) agrees."""
    [details] = json.loads((trial_dir / "result.json").read_text())["agent_result"]["rollout_details"]
    assert details["completion_token_ids"] == [c["completion_ids"] for c in calls]
    assert details["logprobs"] == [c["logprobs"] for c in calls]


def _run_trial(name: str, stack: ProxyStack, session: str, tmp_path: Path, max_turns: int = 1,
               delivery: str = "mount"):
    """One whole trial (sandbox, agent, verifier) through rlkit's trial runner on harbor's Trial."""
    from rlkit.rollout.trial import TrialSpec, run_trial
    from rlkit.scaffolds import ScaffoldRun, get_scaffold

    scaffold = get_scaffold(name)
    run = ScaffoldRun(session=session, model=stack.model, proxy_url=stack.url, max_turns=max_turns)
    fields = scaffold.trial_fields(run, backend="docker", delivery=delivery)
    fields["environment_kwargs"]["build_missing"] = False
    spec = TrialSpec(task_dir=TASK_DIR, trials_dir=tmp_path, session=session, **fields)
    return asyncio.run(run_trial(spec))


# Terminus-2's JSON protocol: a command, then task_complete (asked twice, answered twice).
TERMINUS_ANSWER = ('\\{"analysis": "look", "plan": "list", "commands": \\[\\{"keystrokes": "ls /app\\\\n", '
                   '"duration": 0\\.1\\}\\], "task_complete": true\\}')


def test_terminus_trial_runs_to_completion(scaffold_stack: ProxyStack, task_image: str, tmp_path: Path) -> None:
    session = f"pytest-terminus-{uuid.uuid4().hex[:8]}"
    scaffold_stack.set_sampling(session, {"structured_outputs": {"regex": TERMINUS_ANSWER}, "temperature": 0.0})
    outcome = _run_trial("terminus", scaffold_stack, session, tmp_path, max_turns=4)

    assert outcome.graded, outcome
    assert outcome.reward == 0.0  # the tiny random policy does not fix the bug
    assert outcome.exception_type is None, outcome.exception_message
    calls = _assert_token_record(scaffold_stack.record(session))
    assert all(call["finish_reason"] == "stop" for call in calls)
    agent_dir = tmp_path / session / "agent"
    _assert_trajectory_matches(agent_dir, calls)
    _assert_result_rollout_details(tmp_path / session, calls)
    # Terminus-2's own trajectory (with the tool observations) is kept beside it.
    own = json.loads((agent_dir / "trajectory.terminus.json").read_text())
    assert any("ls /app" in json.dumps(step) for step in own["steps"])


# The policy's own tool-call syntax (qwen3_coder), forced: the proxy must parse it into
# the agent's API, and the agent must run it inside the sandbox.
PROBE = "echo rlkit-was-here-$((6*7))"  # only running it prints ...-42
TOOL_CALLS = {
    "cc": ("Bash", {"command": PROBE, "description": "probe"}),
    "oc": ("bash", {"command": PROBE}),
    "ohsdk": ("terminal", {"command": PROBE}),
}


@contextmanager
def _final_answer_after_first_call(stack: ProxyStack, session: str) -> Iterator[None]:
    """Once the forced tool call is served, force a final answer so the agent stops
    (OpenCode has no turn limit; the others end cleanly instead of at their limit)."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stack.record(session)["num_calls"] >= 1:
                stack.set_sampling(session, FINAL_ANSWER)
                return
            done.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(timeout=10)


def _tool_call_regex(function: str, params: dict[str, str]) -> str:
    import re

    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return re.escape(f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>")


@pytest.mark.parametrize(("name", "delivery"), [(name, "mount") for name in sorted(TOOL_CALLS)] + [("cc", "bake")])
def test_agent_cli_runs_policy_tool_call_through_proxy(name: str, delivery: str, scaffold_stack: ProxyStack,
                                                       agent_images: dict[str, str], tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    if delivery == "bake":
        request.getfixturevalue("baked_images")
    function, params = TOOL_CALLS[name]
    session = f"pytest-tool-{name}-{uuid.uuid4().hex[:8]}"
    scaffold_stack.set_sampling(session, {"structured_outputs": {"regex": _tool_call_regex(function, params)},
                                          "temperature": 0.0})
    with _final_answer_after_first_call(scaffold_stack, session):
        outcome = _run_trial(name, scaffold_stack, session, tmp_path, max_turns=3, delivery=delivery)
    assert outcome.graded, outcome
    assert outcome.reason != "tamper_suspect", outcome  # the mounted agent's links are no finding
    calls = _assert_token_record(scaffold_stack.record(session))
    assert calls[0]["tool_calls"] and not calls[0]["parse_failure"]
    # The tool's output went back to the policy in the next call's prompt (one segment).
    assert len(calls) >= 2
    agent_dir = tmp_path / session / "agent"
    logs = "".join(p.read_text(errors="replace") for p in agent_dir.rglob("*") if p.is_file())
    assert "rlkit-was-here-42" in logs  # the command ran in the sandbox and its output reached the agent
    _assert_trajectory_matches(agent_dir, calls)
    _assert_result_rollout_details(tmp_path / session, calls)
    assert json.loads((agent_dir / "proxy_record.json").read_text())["session_id"] == session
