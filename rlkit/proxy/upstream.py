"""vLLM replicas: sticky-per-session, least-loaded routing and the /v1/completions call."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from rlkit.errors import ContextExceededError, UpstreamError
from rlkit.proxy._http import ConnectFailed, HttpPool, StreamStalled


@dataclass(slots=True)
class Replica:
    base_url: str
    in_flight: int = 0
    sessions: int = 0
    down_until: float = 0.0  # monotonic time; unreachable replicas sit out a while
    # What the replica serves, from its /v1/models: read at start, again whenever it
    # (re)appears (a restart may change --max-model-len) and on every health check.
    max_model_len: int | None = None
    models: tuple[str, ...] = ()
    stale: bool = True  # its window must be read again before the next call


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
        replica.stale = True

    def window(self, configured: int) -> int:
        """The context window a call may use: the configured one, clamped to the smallest
        window a live replica serves."""
        now = time.monotonic()
        served = [r.max_model_len for r in self.replicas if r.max_model_len and r.down_until <= now]
        return min([configured, *served])

    def any_up(self) -> bool:
        now = time.monotonic()
        return any(r.down_until <= now for r in self.replicas)

    def release(self, session_id: str) -> None:
        index = self.assignment.pop(session_id, None)
        if index is not None:
            self.replicas[index].sessions -= 1


class ReplicaUnreachable(UpstreamError):
    """No connection to a replica (down or restarting); another replica may serve the call."""


class UpstreamStalled(UpstreamError):
    """vLLM took longer than the first-token or token timeout; the call was aborted."""


def error_message(raw: bytes) -> str:
    """vLLM's error text from its JSON error body ({"error": {"message"}} or {"message"}), else the body."""
    text = raw.decode(errors="replace")
    try:
        data = orjson.loads(raw)
    except ValueError:
        return text[:2000]
    if isinstance(data, dict):
        inner = data.get("error") if isinstance(data.get("error"), dict) else data
        if isinstance(inner.get("message"), str):
            return inner["message"][:2000]
    return text[:2000]


_CONTEXT_HINTS = ("maximum context length", "context length", "max_model_len", "too long")


class UpstreamClient:
    """Keep-alive connections to every replica, shared by all sessions."""

    def __init__(self, model_name: str, *, first_token_timeout_s: float | None = 600.0,
                 token_timeout_s: float | None = 120.0) -> None:
        self.model_name = model_name
        self.first_token_timeout_s = first_token_timeout_s
        self.token_timeout_s = token_timeout_s
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
        return (await self.describe(replica, timeout_s=10.0))["max_model_len"]

    async def describe(self, replica: Replica, timeout_s: float = 2.0) -> dict[str, Any]:
        """One backend as /health reports it (its /v1/models answer); refreshes the replica's
        window and model list."""
        error = None
        try:
            status, raw = await self._pool(replica).request("GET", "/v1/models", timeout_s=timeout_s)
            data = orjson.loads(raw) if status == 200 else None
            if data is None:
                error = f"/v1/models answered {status}"
        except TimeoutError:
            data, error = None, f"no answer within {timeout_s:g}s"
        except (OSError, ValueError) as exc:
            data, error = None, f"unreachable: {exc}"
        if data is None:
            replica.stale = True
            return {"url": replica.base_url, "up": False, "models": [], "serves_model": False,
                    "max_model_len": None, "error": error}
        entries = [m for m in data.get("data") or [] if isinstance(m, dict)]
        replica.models = tuple(str(m.get("id")) for m in entries)
        mine = next((m for m in entries if m.get("id") == self.model_name), None)
        replica.max_model_len = int(mine["max_model_len"]) if mine and mine.get("max_model_len") else None
        replica.stale = False
        return {"url": replica.base_url, "up": True, "models": list(replica.models), "serves_model": mine is not None,
                "max_model_len": replica.max_model_len,
                "error": None if mine else f"serves {', '.join(replica.models) or 'no model'}, not {self.model_name}"}

    async def healthy(self, replica: Replica, timeout_s: float = 2.0) -> bool:
        try:
            status, _ = await self._pool(replica).request("GET", "/health", timeout_s=timeout_s)
        except (OSError, TimeoutError, ValueError):
            return False
        return status == 200

    async def complete(self, replica: Replica, prompt_ids: list[int], sampling: dict[str, Any]) -> dict[str, Any]:
        """One token-in/token-out completion: vLLM's first choice (token ids, logprobs, finish reason).

        Streamed from vLLM, so a stuck engine is noticed: no first token within
        `first_token_timeout_s`, or no next one within `token_timeout_s`, aborts the call
        (the connection closes and vLLM drops the request)."""
        # Text with special tokens as they are (tool-call markup), spaced as the tokenizer decodes it.
        body = {"model": self.model_name, "prompt": prompt_ids, "logprobs": 0, "return_token_ids": True,
                "echo": False, "stream": True, "skip_special_tokens": False,
                "spaces_between_special_tokens": False, **sampling}
        replica.in_flight += 1
        try:
            status, answer = await self._pool(replica).stream("/v1/completions", orjson.dumps(body),
                                                              first_timeout_s=self.first_token_timeout_s,
                                                              gap_timeout_s=self.token_timeout_s)
        except ConnectFailed as exc:
            raise ReplicaUnreachable(f"vLLM at {replica.base_url} unreachable: {exc}",
                                     upstream=replica.base_url) from exc
        except StreamStalled as exc:
            raise UpstreamStalled(f"vLLM at {replica.base_url} is stuck: {exc}", upstream=replica.base_url,
                                  first_token=exc.events_seen == 0) from exc
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise UpstreamError(f"vLLM at {replica.base_url} failed: {exc!r}", upstream=replica.base_url) from exc
        finally:
            replica.in_flight -= 1
        if status != 200:
            raw = answer if isinstance(answer, bytes) else b""
            text = error_message(raw)
            if status == 400 and any(h in text.lower() for h in _CONTEXT_HINTS):
                replica.stale = True  # its window may have changed (a restart with another --max-model-len)
                raise ContextExceededError(text, upstream=replica.base_url)
            raise UpstreamError(f"vLLM at {replica.base_url} answered {status}: {text}", upstream=replica.base_url,
                                status=status)
        if isinstance(answer, bytes):  # a server that answered in one piece
            choice = orjson.loads(answer)["choices"][0]
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
            return {"token_ids": choice.get("token_ids") or [], "logprobs": [float(x or 0.0) for x in logprobs],
                    "finish_reason": choice.get("finish_reason") or "stop", "text": choice.get("text", "")}
        return _join_stream(answer)


def _join_stream(events: list[bytes]) -> dict[str, Any]:
    """One completion from vLLM's streamed chunks (each: new token ids, their logprobs, text)."""
    token_ids: list[int] = []
    logprobs: list[float] = []
    texts: list[str] = []
    finish = "stop"
    for chunk in orjson.loads(b"[" + b",".join(events) + b"]"):  # one parse for the whole answer
        for choice in chunk.get("choices") or ():
            token_ids += choice.get("token_ids") or ()
            logprobs += [float(x or 0.0) for x in (choice.get("logprobs") or {}).get("token_logprobs") or ()]
            texts.append(choice.get("text") or "")
            finish = choice.get("finish_reason") or finish
    return {"token_ids": token_ids, "logprobs": logprobs, "finish_reason": finish, "text": "".join(texts)}
