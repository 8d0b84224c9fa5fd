"""Per-trial session state: call records, token chains, sampling overrides, end reasons."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from rlkit.proxy.render import normalize_message, tools_key
from rlkit.proxy.trajectory import CallRecord, assemble, full_prompt_ids

MAX_CHAINS = 8  # open conversation branches remembered per session (main agent, sub-agents, ...)


def session_for_api_key(api_key: str) -> str:
    """Session id derived from an API key; the key itself is never stored or logged."""
    return "key-" + hashlib.sha256(api_key.encode()).hexdigest()[:20]


@dataclass(slots=True)
class Chain:
    """A served conversation: normalized messages incl. our reply, and the last call's index.

    `ids` is the exact token sequence so far: prompt + completion of `last_call`.
    """

    messages: tuple[tuple, ...]
    tools_key: bytes
    last_call: int
    ids: list[int]
    ended_with_eos: bool
    prompt_len: int = 0  # tokens of last_call's prompt (ids[:prompt_len])


@dataclass
class Session:
    session_id: str
    calls: list[CallRecord] = field(default_factory=list)
    chains: list[Chain] = field(default_factory=list)
    sampling_overrides: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # e.g. "context_exceeded"
    closed: bool = False
    continuation_failures: int = 0  # template not prefix-stable; the prompt was rendered in full
    limits: dict[str, int] = field(default_factory=dict)  # max_calls / max_response_tokens overrides
    response_tokens: int = 0  # after the first prompt: generated plus inserted, counted per call
    refused: int = 0  # requests refused before generating (prompt too long); they count as calls
    pinned: bool = False  # opened by the engine (limits, sampling): kept even with no calls
    # The last request's messages and their normalized forms. Agents resend the whole history
    # on every call; an equal dict (compared in C) reuses its form instead of normalizing again,
    # so a call's cost does not grow with the conversation.
    last_messages: list[dict[str, Any]] = field(default_factory=list)
    last_normalized: tuple[tuple, ...] = ()
    # Same for the tool list (tens of KB for Claude Code): serialized once, then compared.
    last_tools: list[dict[str, Any]] | None = None
    last_tools_key: bytes = b"[]"  # tools_key(None)

    def tools_key(self, tools: list[dict[str, Any]] | None) -> bytes:
        if tools != self.last_tools:
            self.last_tools, self.last_tools_key = tools, tools_key(tools)
        return self.last_tools_key

    def normalize(self, messages: list[dict[str, Any]]) -> tuple[tuple, ...]:
        prev, prev_norm = self.last_messages, self.last_normalized
        known = min(len(prev), len(messages))
        norm = tuple(prev_norm[i] if i < known and m == prev[i] else normalize_message(m)
                     for i, m in enumerate(messages))
        self.last_messages, self.last_normalized = messages, norm
        return norm

    def find_chain(self, messages: tuple[tuple, ...], tools_key: bytes) -> Chain | None:
        """The longest chain whose messages are a strict prefix of `messages` (the newest on ties)."""
        best: Chain | None = None
        for chain in self.chains:
            n = len(chain.messages)
            if (n < len(messages) and chain.tools_key == tools_key and (best is None or n >= len(best.messages))
                    and messages[:n] == chain.messages):
                best = chain
        return best

    def find_retry(self, messages: tuple[tuple, ...], tools_key: bytes) -> Chain | None:
        """A chain whose last call had exactly this prompt (a client retrying a request)."""
        for chain in reversed(self.chains):
            if chain.tools_key == tools_key and chain.messages[:-1] == messages:
                return chain
        return None

    def add_chain(self, chain: Chain, replaced: Chain | None) -> None:
        if replaced is not None and replaced in self.chains:
            self.chains.remove(replaced)
        self.chains.append(chain)
        if len(self.chains) > MAX_CHAINS:
            self.chains.pop(0)

    def add_reason(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def full_prompt_ids(self, call_index: int) -> list[int]:
        return full_prompt_ids(self.calls, call_index)

    def trajectory(self, *, calls: str = "full") -> dict[str, Any]:
        """JSON-able export: segments for training plus per-call records and flags.

        calls="full": each call with its whole prompt (easy to consume, quadratic in size);
        "delta": each call's prompt as only the ids after its `parent` call; "none": no calls.
        """
        if calls not in ("full", "delta", "none"):
            raise ValueError(f"calls must be full, delta or none, not {calls!r}")
        assembly = assemble(self.calls)
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "num_calls": len(self.calls),
            "num_segments": len(assembly.segments),
            "num_breaks": assembly.num_breaks,
            "parse_failures": sum(c.parse_failure for c in self.calls),
            "continuation_failures": self.continuation_failures,
            "response_tokens": self.response_tokens,
            "reasons": list(self.reasons),
            "closed": self.closed,
            "segments": [s.to_json() for s in assembly.segments],
        }
        if calls == "full":
            out["calls"] = [c.to_json(self.full_prompt_ids(c.index)) for c in self.calls]
        elif calls == "delta":
            out["calls"] = [c.to_json() for c in self.calls]
        return out


class SessionStore:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = Session(session_id)
        return session

    def peek(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def pop(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)

    def ids(self) -> list[str]:
        return list(self._sessions)
