"""vLLM replicas: sticky-per-session, least-loaded routing and the /v1/completions call."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from rlkit.errors import ContextExceededError, UpstreamError
from rlkit.proxy._http import ConnectFailed, HttpPool


@dataclass(slots=True)
class Replica:
    base_url: str
    in_flight: int = 0
    sessions: int = 0
    down_until: float = 0.0  # monotonic time; unreachable replicas sit out a while


@dataclass
class ReplicaRouter:
    """Keeps a session on one replica (its prefix cache); new sessions go to the least loaded.

    A replica that cannot be reached is benched for `down_s`; its sessions move to a live
    one (losing only their prefix cache) instead of failing until the run ends.
    """

    replicas: list[Replica]
    assignment: dict[str, int] = field(default_factory=dict)
    down_s: float = 30.0

    @classmethod
    def from_urls(cls, urls: list[str]) -> ReplicaRouter:
        if not urls:
            raise ValueError("at least one upstream URL is needed")
        return cls([Replica(u.rstrip("/")) for u in urls])

    def pick(self, session_id: str) -> Replica:
        index = self.assignment.get(session_id)
        if index is not None and self.replicas[index].down_until > time.monotonic():
            self.release(session_id)
            index = None
        if index is None:
            now = time.monotonic()
            index = min(range(len(self.replicas)),
                        key=lambda i: (self.replicas[i].down_until > now, self.replicas[i].in_flight,
                                       self.replicas[i].sessions, i))
            self.assignment[session_id] = index
            self.replicas[index].sessions += 1
        return self.replicas[index]

    def mark_down(self, replica: Replica) -> None:
        replica.down_until = time.monotonic() + self.down_s

    def any_up(self) -> bool:
        now = time.monotonic()
        return any(r.down_until <= now for r in self.replicas)

    def release(self, session_id: str) -> None:
        index = self.assignment.pop(session_id, None)
        if index is not None:
            self.replicas[index].sessions -= 1


class ReplicaUnreachable(UpstreamError):
    """No connection to a replica (down or restarting); another replica may serve the call."""


_CONTEXT_HINTS = ("maximum context length", "context length", "max_model_len", "too long")


class UpstreamClient:
    """Keep-alive connections to every replica, shared by all sessions."""

    def __init__(self, model_name: str, *, timeout_s: float = 3600.0) -> None:
        self.model_name = model_name
        self._timeout_s = timeout_s
        self._pools: dict[str, HttpPool] = {}

    def _pool(self, replica: Replica) -> HttpPool:
        pool = self._pools.get(replica.base_url)
        if pool is None:
            pool = self._pools[replica.base_url] = HttpPool(replica.base_url)
        return pool

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def max_model_len(self, replica: Replica) -> int | None:
        """The context window vLLM serves with (from /v1/models), or None if unknown."""
        try:
            status, raw = await self._pool(replica).request("GET", "/v1/models", timeout_s=10)
            data = orjson.loads(raw) if status == 200 else {}
        except (OSError, TimeoutError, ValueError):
            return None
        for model in data.get("data") or []:
            if model.get("id") == self.model_name and model.get("max_model_len"):
                return int(model["max_model_len"])
        return None

    async def healthy(self, replica: Replica, timeout_s: float = 2.0) -> bool:
        try:
            status, _ = await self._pool(replica).request("GET", "/health", timeout_s=timeout_s)
        except (OSError, TimeoutError, ValueError):
            return False
        return status == 200

    async def complete(self, replica: Replica, prompt_ids: list[int], sampling: dict[str, Any]) -> dict[str, Any]:
        """One token-in/token-out completion: vLLM's first choice (token ids, logprobs, finish reason)."""
        # Text with special tokens as they are (tool-call markup), spaced as the tokenizer decodes it.
        body = {"model": self.model_name, "prompt": prompt_ids, "logprobs": 0, "return_token_ids": True,
                "echo": False, "stream": False, "skip_special_tokens": False,
                "spaces_between_special_tokens": False, **sampling}
        replica.in_flight += 1
        try:
            status, raw = await self._pool(replica).request("POST", "/v1/completions", orjson.dumps(body),
                                                            timeout_s=self._timeout_s)
        except ConnectFailed as exc:
            raise ReplicaUnreachable(f"vLLM at {replica.base_url} unreachable: {exc}",
                                     upstream=replica.base_url) from exc
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise UpstreamError(f"vLLM at {replica.base_url} failed: {exc!r}", upstream=replica.base_url) from exc
        finally:
            replica.in_flight -= 1
        if status != 200:
            text = raw.decode(errors="replace")[:2000]
            if status == 400 and any(h in text.lower() for h in _CONTEXT_HINTS):
                raise ContextExceededError(text, upstream=replica.base_url)
            raise UpstreamError(f"vLLM at {replica.base_url} answered {status}: {text}", upstream=replica.base_url,
                                status=status)
        data = orjson.loads(raw)
        choice = data["choices"][0]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        return {"token_ids": choice.get("token_ids") or [], "logprobs": [float(x or 0.0) for x in logprobs],
                "finish_reason": choice.get("finish_reason") or "stop", "text": choice.get("text", "")}
