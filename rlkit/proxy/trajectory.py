"""Per-call token records and their assembly into trainable segments.

Pure python, no I/O. A session's calls are merged into segments: a call whose prompt
extends an earlier call's prompt + completion continues that call's segment. Tokens the
model generated get mask 1 and their sampled logprob; tokens inserted between calls
(tool output, user turns, the turn separator) get mask 0 and logprob 0. Sampled tokens
are never re-tokenized: a segment is the literal concatenation of the ids vLLM saw and
returned. Where the prefix breaks (history rewritten, context compacted, interleaved
sub-agent) a new segment starts and the break is counted, so drift shows as a metric.

To keep memory linear in the conversation, a call stores its prompt as a `parent` call
plus only the new `prompt_ids`; `parent=None` means `prompt_ids` is the whole prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class CallRecord:
    """One completion served by the proxy."""

    index: int
    parent: int | None  # call whose prompt+completion this prompt extends, or None
    prompt_ids: list[int]  # new prompt tokens after the parent's sequence (all of them if no parent)
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""  # the reply text the agent received (tool calls excluded)
    parse_failure: bool = False
    latency_s: float = 0.0
    upstream: str = ""

    def to_json(self, full_prompt_ids: list[int] | None = None) -> dict[str, Any]:
        return {
            "index": self.index,
            "parent": self.parent,
            "prompt_ids": full_prompt_ids if full_prompt_ids is not None else self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
            "content": self.content,
            "parse_failure": self.parse_failure,
            "latency_s": round(self.latency_s, 6),
            "upstream": self.upstream,
        }


@dataclass(slots=True)
class Segment:
    """One contiguous token sequence, the unit verl trains on (an AgentLoopOutput row)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    parse_failures: int = 0
    finish_reason: str = ""

    @property
    def num_turns(self) -> int:
        return len(self.calls)

    def full_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "response_logprobs": self.response_logprobs,
            "num_turns": self.num_turns,
            "calls": self.calls,
            "flags": {"parse_failures": self.parse_failures, "finish_reason": self.finish_reason},
        }


def full_prompt_ids(calls: list[CallRecord], index: int) -> list[int]:
    """The whole prompt of call `index`, rebuilt from its parent chain."""
    parts: list[list[int]] = []
    cursor: int | None = index
    first = True
    while cursor is not None:
        call = calls[cursor]
        if not first:
            parts.append(call.completion_ids)
        parts.append(call.prompt_ids)
        first = False
        cursor = call.parent
    out: list[int] = []
    for part in reversed(parts):
        out.extend(part)
    return out


def _append_call(segment: Segment, inserted: list[int], call: CallRecord) -> None:
    segment.response_ids.extend(inserted)
    segment.response_mask.extend([0] * len(inserted))
    segment.response_logprobs.extend([0.0] * len(inserted))
    segment.response_ids.extend(call.completion_ids)
    segment.response_mask.extend([1] * len(call.completion_ids))
    segment.response_logprobs.extend(call.logprobs)
    segment.calls.append(call.index)
    segment.parse_failures += int(call.parse_failure)
    segment.finish_reason = call.finish_reason


def _new_segment(prompt: list[int], call: CallRecord) -> Segment:
    segment = Segment(prompt_ids=list(prompt))
    _append_call(segment, [], call)
    return segment


@dataclass(slots=True)
class Assembly:
    segments: list[Segment]
    num_breaks: int


def assemble(calls: list[CallRecord]) -> Assembly:
    """Merge calls (in serving order) into segments; count prefix breaks.

    A call with a parent continues the segment that the parent ended. Otherwise (no
    parent, or the parent's segment has moved on, i.e. a retry or rollback) its full
    prompt is compared token by token with every open segment and extends the longest
    one it starts with; failing that it opens a new segment, which counts as a break.
    """
    segments: list[Segment] = []
    segment_of_last_call: dict[int, int] = {}  # call index -> segment it ended (still the tail)
    breaks = 0
    for call in calls:
        if len(call.logprobs) != len(call.completion_ids):
            raise ValueError(f"call {call.index}: {len(call.logprobs)} logprobs for "
                             f"{len(call.completion_ids)} completion ids")
        seg_index = segment_of_last_call.pop(call.parent, None) if call.parent is not None else None
        if seg_index is not None:
            _append_call(segments[seg_index], call.prompt_ids, call)
        else:
            prompt = full_prompt_ids(calls, call.index) if call.parent is not None else call.prompt_ids
            best, best_len = None, -1
            for i, seg in enumerate(segments):
                seq_len = len(seg.prompt_ids) + len(seg.response_ids)
                if seq_len > best_len and seq_len <= len(prompt) and prompt[:seq_len] == seg.full_ids():
                    best, best_len = i, seq_len
            if best is not None:
                segment_of_last_call = {k: v for k, v in segment_of_last_call.items() if v != best}
                _append_call(segments[best], prompt[best_len:], call)
                seg_index = best
            else:
                if segments:
                    breaks += 1
                segments.append(_new_segment(prompt, call))
                seg_index = len(segments) - 1
        segment_of_last_call[call.index] = seg_index
    return Assembly(segments=segments, num_breaks=breaks)
