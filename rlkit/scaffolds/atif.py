"""The proxy's per-session record as an ATIF trajectory (harbor's trajectory models).

Every LLM call the proxy served for a trial becomes one agent step whose metrics hold
the exact `prompt_token_ids`, `completion_token_ids` and `logprobs` the policy
produced — the ids verl trains on, never a re-tokenization of the text. The proxy's
session summary (segments, prefix breaks, parse failures) goes under `extra`.

What a reader needs to follow the trial goes in too: the task's instruction as the first
(user) step, and on each agent step what came back to the agent (terminal output, tool
results) from the agent's own ATIF conversion (`trajectory.<scaffold>.json`), matched to
the calls in order (one model call per agent step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Keys the proxy may use for the per-call list and for a call's fields; the reader
# accepts each spelling so a record from any proxy version converts.
_CALL_LIST_KEYS = ("calls", "requests", "turns")
TOKEN_TRAJECTORY_NOTE = "token ids recorded by the rlkit proxy"
# Bulky or duplicated parts of the record left out of the trajectory's `extra`.
_SUMMARY_SKIP = set(_CALL_LIST_KEYS) | {"session", "session_id", "segments"}


def calls_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-call entries of a proxy session record, in call order."""
    for key in _CALL_LIST_KEYS:
        value = record.get(key)
        if isinstance(value, list):
            return [c for c in value if isinstance(c, dict)]
    return []


def _first(call: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if call.get(key) is not None:
            return call[key]
    return None


def _tool_calls(call: dict[str, Any], step_id: int) -> list[Any] | None:
    from harbor.models.trajectories import ToolCall

    raw = _first(call, "tool_calls", "parsed_tool_calls") or []
    out = []
    for i, tc in enumerate(raw):
        fn = tc.get("function", tc)
        args = fn.get("arguments", fn.get("input", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"_raw": args}
        if not isinstance(args, dict):
            args = {"_value": args}
        out.append(ToolCall(tool_call_id=str(tc.get("id") or f"call_{step_id}_{i}"),
                            function_name=str(fn.get("name", "")), arguments=args))
    return out or None


def record_to_trajectory(record: dict[str, Any], *, scaffold: str, model_name: str | None,
                         agent_version: str = "unknown", instruction: str | None = None) -> Any:
    """harbor `Trajectory` from a proxy session record; None when the session made no call. With an
    instruction, it is the first step (source user) and the calls follow."""
    from harbor.models.trajectories import Agent, FinalMetrics, Metrics, Step, Trajectory

    steps = [Step(step_id=1, source="user", message=instruction)] if instruction else []
    total_prompt = total_completion = 0
    for step_id, call in enumerate(calls_of(record), start=len(steps) + 1):
        prompt_ids = list(_first(call, "prompt_token_ids", "prompt_ids") or [])
        completion_ids = list(_first(call, "completion_token_ids", "completion_ids", "token_ids") or [])
        logprobs = _first(call, "logprobs", "completion_logprobs")
        total_prompt += len(prompt_ids)
        total_completion += len(completion_ids)
        extra = {k: call[k] for k in ("finish_reason", "parse_failure", "latency_s", "latency_ms", "reason",
                                      "segment") if k in call}
        steps.append(Step(
            step_id=step_id,
            source="agent",
            model_name=model_name,
            message=str(_first(call, "text", "content", "completion_text") or ""),
            tool_calls=_tool_calls(call, step_id),
            metrics=Metrics(prompt_tokens=len(prompt_ids), completion_tokens=len(completion_ids),
                            prompt_token_ids=prompt_ids, completion_token_ids=completion_ids,
                            logprobs=[float(x) for x in logprobs] if logprobs is not None else None),
            extra=extra or None,
        ))
    if not any(s.source == "agent" for s in steps):
        return None
    summary = {k: v for k, v in record.items() if k not in _SUMMARY_SKIP}
    if isinstance(record.get("segments"), list):
        summary["num_segments"] = len(record["segments"])
    return Trajectory(
        session_id=str(_first(record, "session", "session_id") or ""),
        agent=Agent(name=f"rlkit-{scaffold}", version=agent_version, model_name=model_name),
        steps=steps,
        final_metrics=FinalMetrics(total_prompt_tokens=total_prompt, total_completion_tokens=total_completion,
                                   total_steps=sum(s.source == "agent" for s in steps)),
        notes=TOKEN_TRAJECTORY_NOTE,
        extra={"proxy": summary} if summary else None,
    )


def write_token_trajectory(agent_dir: Path, record: dict[str, Any], *, scaffold: str,
                           model_name: str | None, agent_version: str = "unknown",
                           instruction: str | None = None) -> Path | None:
    """Write `agent/trajectory.json` from the proxy record.

    A trajectory the agent wrote itself (its own ATIF conversion) is kept beside it as
    `trajectory.<scaffold>.json`; it has the agent's view (tool outputs) but not the ids.
    Its observations (and its first user message, when no instruction is given) are
    copied onto the token trajectory's steps.
    """
    agent_dir.mkdir(parents=True, exist_ok=True)
    target, own_path = agent_dir / "trajectory.json", agent_dir / f"trajectory.{scaffold}.json"
    if target.exists() and not _is_token_trajectory(target):
        target.replace(own_path)
    own = _read_steps(own_path)
    if instruction is None:
        instruction = next((m for s in own if s.get("source") == "user" and isinstance(m := s.get("message"), str)),
                           None)
    trajectory = record_to_trajectory(record, scaffold=scaffold, model_name=model_name,
                                      agent_version=agent_version, instruction=instruction)
    if trajectory is None:
        return None
    add_observations(trajectory, [s for s in own if s.get("source") == "agent"])
    target.write_text(trajectory.model_dump_json(indent=2, exclude_none=True))
    return target


def _read_steps(path: Path) -> list[dict[str, Any]]:
    try:
        steps = json.loads(path.read_text()).get("steps")
    except (OSError, ValueError, AttributeError):
        return []
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def add_observations(trajectory: Any, own_agent_steps: list[dict[str, Any]]) -> int:
    """Copy the agent's own observations onto the token trajectory's agent steps, in order; how many."""
    from harbor.models.trajectories import Observation, ObservationResult

    agent_steps = [s for s in trajectory.steps if s.source == "agent"]
    copied = 0
    for step, own in zip(agent_steps, own_agent_steps, strict=False):
        results = ((own.get("observation") or {}).get("results") if isinstance(own.get("observation"), dict)
                   else None)
        if step.observation is not None or not isinstance(results, list):
            continue
        ids = {tc.tool_call_id for tc in step.tool_calls or []}
        kept = [ObservationResult(source_call_id=r.get("source_call_id") if r.get("source_call_id") in ids else None,
                                  content=r.get("content"))
                for r in results if isinstance(r, dict) and isinstance(r.get("content"), str | list)]
        if kept:
            step.observation = Observation(results=kept)
            copied += 1
    return copied


def _is_token_trajectory(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("notes") == TOKEN_TRAJECTORY_NOTE
    except (OSError, ValueError, AttributeError):
        return False
