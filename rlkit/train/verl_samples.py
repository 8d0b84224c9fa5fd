"""One TrialRecord as one verl sample: the fields of verl's `AgentLoopOutput`, without verl.

verl's agent-loop worker turns every input row into exactly one output, so a trial
whose proxy record broke into several segments (a prefix break: compaction, a rewritten
history, side calls) cannot become several samples there. The rule, written once in
`rlkit.rollout.records` and followed by the local trainer too: **train on the longest
chain** (`longest_chain`). The other segments are dropped and counted: `num_breaks`
(segments - 1) and `dropped_model_tokens` go into `extra_fields`,
so breaks show up as a metric instead of silently shrinking the batch.

Masking follows `rlkit.rollout.records`, and the local trainer: a masked trial
(infrastructure failure, or no model tokens) is **no sample at all** (`sample_fields`
returns None and the agent loop returns no output). verl's GRPO estimator groups by uid
and reads only scores, never the mask, so a placeholder with a score would still move its
group's mean and std: in [pass, pass, masked] both passes would get a positive advantage,
and a sandbox failure would train the policy. verl's V1 agent-loop worker stores nothing for
an empty output, and its advantage step computes GRPO over the outputs that exist
(verl/trainer/ppo/v1/utils.py: compute_advantage_for_multi_trajectories), which is what the
local trainer does after dropping masked trials (rlkit/train/batch.py: build_batch).
"""

from __future__ import annotations

from typing import Any

from rlkit.rollout.records import TrialRecord
from rlkit.tasks.index import IndexRow


def sample_fields(record: TrialRecord, *, max_response: int | None = None) -> dict[str, Any] | None:
    """`AgentLoopOutput` keyword arguments (less `metrics`) for one trial; None for a masked
    trial, which is no sample (see the module docstring).

    `max_response` caps the response side (verl pads every response to
    `rollout.response_length`); the cut is counted in `extra_fields["response_cut"]`."""
    if not record.trainable:
        return None
    chain = record.training_segment()
    assert chain is not None  # a trainable record has model tokens
    sampled = sum(sum(s.response_mask) for s in record.segments)
    extra: dict[str, Any] = {
        "outcome": record.outcome.value, "truncated": record.outcome.truncated, "task_id": record.task_id,
        "session": record.session, "num_breaks": max(record.num_breaks, len(record.segments) - 1),
        "parse_failures": record.parse_failures, "attempts": record.attempts,
        "trial_dir": str(record.trial_dir) if record.trial_dir else "",
        "timings": dict(record.timings), "response_cut": 0, "detail": record.detail or "",
        "dropped_model_tokens": sampled - sum(chain.response_mask),
    }
    ids, mask, logprobs = chain.response_ids, chain.response_mask, chain.response_logprobs
    if max_response is not None and len(ids) > max_response:
        extra["response_cut"] = len(ids) - max_response
        ids, mask, logprobs = ids[:max_response], mask[:max_response], logprobs[:max_response]
    return {"prompt_ids": list(chain.prompt_ids), "response_ids": list(ids), "response_mask": list(mask),
            "response_logprobs": [float(x) for x in logprobs], "reward_score": float(record.reward),
            "num_turns": chain.num_turns or record.num_turns, "extra_fields": extra}


def row_from_verl(fields: dict[str, Any]) -> IndexRow:
    """The index row behind one verl sample (verl's dataset hands every parquet column through)."""
    def plain(value: Any) -> Any:
        return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value

    known = {name: plain(fields[name]) for name in IndexRow.model_fields if name in fields and fields[name] is not None}
    if "instruction" not in known:
        prompt = fields.get("raw_prompt", fields.get("prompt"))
        messages = list(prompt) if prompt is not None and not isinstance(prompt, str) else []
        known["instruction"] = next((m["content"] for m in messages if m.get("role") == "user"), "") if messages \
            else str(prompt or "")
    return IndexRow(**known)


def group_uid(fields: dict[str, Any], row: IndexRow) -> str:
    """verl's prompt-group id when the batch carries one, else the row's index and task."""
    uid = fields.get("uid")
    if uid is not None:
        return str(uid)
    extra = fields.get("extra_info") or {}
    return f"{extra.get('index', '')}:{row.task_id}"
