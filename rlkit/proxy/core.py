"""The proxy's engine, independent of HTTP: render, generate, parse, record.

`ProxyCore.chat(session_id, messages, tools, sampling)` serves one chat turn given in
OpenAI message format (the Anthropic front end translates into it first).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlkit.config.schema import DEFAULT_PROXY_PORT
from rlkit.errors import ContextExceededError, ProxyError, SessionBudgetError, UpstreamError
from rlkit.proxy.render import ChatRenderer, normalize_message
from rlkit.proxy.session import Chain, Session, SessionStore
from rlkit.proxy.toolcalls import ParsedCompletion
from rlkit.proxy.trajectory import CallRecord
from rlkit.proxy.upstream import ReplicaRouter, ReplicaUnreachable, UpstreamClient, UpstreamStalled

log = logging.getLogger("rlkit.proxy")

# A session's budgets when nobody set them: well above a real agent episode, far below a
# client looping (opencode overflowing and compacting: 604 requests, 477k tokens in 10 min).
DEFAULT_MAX_CALLS = 500
DEFAULT_MAX_SESSION_TOKENS = 500_000

# Request fields passed through to vLLM's sampling (OpenAI names plus vLLM extras).
SAMPLING_KEYS = frozenset({
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "structured_outputs", "stop_token_ids", "ignore_eos", "min_tokens",
})  # not "n": one trajectory per session


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str
    upstreams: list[str] = Field(min_length=1)
    served_model_name: str | None = None  # vLLM's --served-model-name; default: model_path
    tool_call_parser: str = "qwen3_coder"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PROXY_PORT
    max_model_len: int = 32768  # MAX_PROMPT + MAX_RESP, or the model's window
    # Cap per call; default: what is left of the window. A cap below the client's own
    # max_tokens cuts replies the client expected to fit: Claude Code then sees
    # stop_reason "max_tokens" and spends a turn asking to continue. Leave it unset (the
    # window and the session budget bound a call anyway), or set the client's max_tokens
    # (CLAUDE_CODE_MAX_OUTPUT_TOKENS) at or below it.
    max_response_tokens: int | None = None
    # Per-session budgets, always finite (None: the default); a session can override them.
    # Agents do not stop on their own: Terminus-2 re-asks on truncated replies, OpenCode with a
    # window smaller than its prompt compacts and overflows forever. Refused requests count.
    max_calls_per_session: int = DEFAULT_MAX_CALLS
    # Tokens after the session's first prompt, generated and inserted (MAX_RESP).
    max_response_tokens_per_session: int = DEFAULT_MAX_SESSION_TOKENS
    default_sampling: dict[str, Any] = Field(default_factory=dict)  # under the request's own values
    # A stuck vLLM (hung, SIGSTOPped, deadlocked) must not hang every agent: no first token
    # within this (queueing + prefill) or no next token within `token_timeout_s` ends the call
    # with an API error naming the reason, and aborts the vLLM request.
    first_token_timeout_s: float = Field(default=600.0, gt=0)
    token_timeout_s: float = Field(default=120.0, gt=0)
    # At start the parser must read the chat template's own tool calls; False: only warn.
    strict_parser_check: bool = False
    # Streaming answers send a keep-alive (SSE comment / Anthropic ping) this often while generating.
    stream_keepalive_s: float = 10.0
    # Import litellm's Anthropic adapter at start (3-4 s of CPU), so the first Anthropic request is not
    # slow; launchers set it from AGENT_API. False: the first Anthropic request imports it.
    warm_anthropic: bool = True

    @field_validator("max_calls_per_session", "max_response_tokens_per_session", mode="before")
    @classmethod
    def _finite_budget(cls, value: Any, info: Any) -> Any:
        if value is None:
            return DEFAULT_MAX_CALLS if info.field_name == "max_calls_per_session" else DEFAULT_MAX_SESSION_TOKENS
        return value


@dataclass(slots=True)
class ChatResult:
    content: str
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments" (json str)}]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    prompt_tokens: int
    completion_tokens: int
    call_index: int
    parse_failure: bool = False


def pick_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in SAMPLING_KEYS and v is not None}


class ProxyCore:
    def __init__(self, config: ProxyConfig, *, renderer: ChatRenderer | None = None,
                 parser: Any = None, client: UpstreamClient | None = None) -> None:
        self.config = config
        self.renderer = renderer or ChatRenderer.from_path(config.model_path)
        if parser is None:
            from rlkit.proxy.toolcalls import VerlToolParser

            parser = VerlToolParser(config.tool_call_parser, self.renderer.tokenizer)
        self.parser = parser
        self.router = ReplicaRouter.from_urls(config.upstreams)
        self.client = client or UpstreamClient(config.served_model_name or config.model_path,
                                               first_token_timeout_s=config.first_token_timeout_s,
                                               token_timeout_s=config.token_timeout_s)
        self.sessions = SessionStore()
        self.parser_check: dict[str, Any] | None = None
        self.stats: dict[str, float] = {"calls": 0, "parse_failures": 0, "context_exceeded": 0,
                                        "upstream_errors": 0, "upstream_stalls": 0, "budget_exhausted": 0, "continuation_failures": 0,
                                        "full_renders": 0, "prompt_tokens": 0, "completion_tokens": 0, "upstream_seconds": 0.0}

    async def check_parser(self) -> dict[str, Any]:
        """Does TOOL_CALL_PARSER read the tool calls the chat template renders? (cached)"""
        if self.parser_check is None:
            from rlkit.proxy.parsers import describe, probe_tokenizer
            from rlkit.proxy.toolcalls import VerlToolParser

            if isinstance(self.parser, VerlToolParser):
                verdict = await probe_tokenizer(self.renderer.tokenizer, self.parser.name)
                self.parser_check = {"ok": verdict["ok"], "detail": describe(verdict),
                                     "rendered_call": verdict["completion"], "parses": verdict["parses"]}
            else:
                self.parser_check = {"ok": True, "detail": "custom parser, not checked", "rendered_call": ""}
        return self.parser_check

    async def start(self) -> None:
        check = await self.check_parser()
        if not check["ok"]:
            message = (f"TOOL_CALL_PARSER={self.config.tool_call_parser} does not match the chat template of "
                       f"{self.config.model_path}: {check['detail']}; every tool call will be a parse failure")
            if self.config.strict_parser_check:
                from rlkit.errors import UserError

                raise UserError(message, key="TOOL_CALL_PARSER",
                                fix="set TOOL_CALL_PARSER to the parser of the model's chat template")
            log.warning(message)
        # Never promise more context than the replicas serve: read their windows now (again
        # whenever one comes back; `max_model_len` takes the smallest).
        for replica in self.router.replicas:
            await self.client.describe(replica, timeout_s=10.0)

    @property
    def max_model_len(self) -> int:
        """The window calls get: the configured one, clamped to what the live replicas serve."""
        return self.router.window(self.config.max_model_len)

    async def _refresh_windows(self) -> None:
        """Re-read the window of replicas that (re)appeared since their last read."""
        for replica in self.router.replicas:
            if replica.stale and replica.down_until <= time.monotonic():
                answer = await self.client.describe(replica)
                if not answer["up"]:
                    self.router.mark_down(replica)

    async def close(self) -> None:
        await self.client.close()

    # --- session API used by the rollout engine and the admin endpoints ---------------------------

    def set_session_sampling(self, session_id: str, overrides: dict[str, Any], *, replace: bool = False) -> None:
        """Sampling params forced on every call of a session (they win over the request's)."""
        session = self.sessions.get(session_id)
        session.pinned = True
        if replace:
            session.sampling_overrides = dict(overrides)
        else:
            session.sampling_overrides.update(overrides)
        session.sampling_overrides = {k: v for k, v in session.sampling_overrides.items() if v is not None}

    def set_session_limits(self, session_id: str, *, max_calls: int | None = None,
                           max_response_tokens: int | None = None) -> dict[str, int]:
        """Budgets of one session, over the config's (a None leaves that one as configured)."""
        session = self.sessions.get(session_id)
        session.pinned = True
        limits = session.limits
        for key, value in (("max_calls", max_calls), ("max_response_tokens", max_response_tokens)):
            if value is not None:
                limits[key] = int(value)
        return dict(limits)

    def _budget_left(self, session: Session, new_prompt: list[int]) -> int | None:
        """Response tokens this call may generate under the session's budgets (None: unbounded)."""
        def exhausted(reason: str, what: str) -> SessionBudgetError:
            session.add_reason(reason)
            self.stats["budget_exhausted"] += 1
            return SessionBudgetError(f"this session used all of its {what}")

        max_calls = session.limits.get("max_calls", self.config.max_calls_per_session)
        if max_calls is not None and len(session.calls) + session.refused >= max_calls:
            raise exhausted("call_limit", f"{max_calls} model calls")
        budget = session.limits.get("max_response_tokens", self.config.max_response_tokens_per_session)
        if budget is None:
            return None
        left = budget - session.response_tokens - (len(new_prompt) if session.calls else 0)
        if left <= 0:
            raise exhausted("response_budget", f"{budget} response tokens")
        return left

    def _too_long(self, session: Session, prompt_tokens: int, window: int,
                  upstream: str | None = None) -> ContextExceededError:
        """The overflow refusal, worded as the clients recognise it ("prompt is too long")."""
        self.stats["context_exceeded"] += 1
        session.add_reason("context_exceeded")
        session.refused += 1
        detail = f" (vLLM: {upstream})" if upstream else ""
        return ContextExceededError(f"prompt is too long: {prompt_tokens} tokens > {window - 1} maximum{detail}",
                                    prompt_tokens=prompt_tokens, max_tokens=window)

    def trajectory(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        session = self.sessions.peek(session_id)
        return session.trajectory(calls=calls) if session is not None else None

    def close_session(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        """Drop a session and return its final trajectory (None if it never existed)."""
        session = self.sessions.pop(session_id)
        self.router.release(session_id)
        if session is None:
            return None
        session.closed = True
        return session.trajectory(calls=calls)

    def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        return len(self.renderer.encode_full(messages, tools))

    # --- one chat turn ----------------------------------------------------------------------------

    def _prompt(self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                norm: tuple[tuple, ...], tkey: bytes) -> tuple[int | None, Chain | None, list[int], list[int]]:
        """(parent call, chain continued, new prompt ids to record, full prompt ids)."""
        retry = session.find_retry(norm, tkey)
        if retry is not None:  # same prompt again: same ids, a sibling of the earlier call
            earlier = session.calls[retry.last_call]
            return earlier.parent, None, earlier.prompt_ids, retry.ids[:retry.prompt_len]
        chain = session.find_chain(norm, tkey)
        if chain is not None:
            delta = self.renderer.encode_continuation(messages[len(chain.messages):], tools,
                                                      previous_ended_with_eos=chain.ended_with_eos, key=tkey)
            if delta is not None:
                return chain.last_call, chain, delta, chain.ids + delta
            session.continuation_failures += 1
            self.stats["continuation_failures"] += 1
        self.stats["full_renders"] += 1
        full = self.renderer.encode_full(messages, tools)
        return None, None, full, full

    async def _complete(self, session_id: str, prompt_ids: list[int],
                        params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """One completion on the session's replica; an unreachable one is benched and the next tried."""
        for _ in range(len(self.router.replicas)):
            replica = self.router.pick(session_id)
            try:
                return await self.client.complete(replica, prompt_ids, params), replica
            except ReplicaUnreachable as exc:
                self.router.mark_down(replica)
                log.warning("%s; benched for %.0fs", exc.message, self.router.down_s)
                if not self.router.any_up():
                    raise
        raise UpstreamError("no vLLM replica is reachable")

    async def chat(self, session_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   sampling: dict[str, Any], max_tokens: int | None = None,
                   on_accepted: Callable[[int], Awaitable[None]] | None = None,
                   client_gone: Callable[[], bool] | None = None) -> ChatResult:
        """Serve one turn. `on_accepted(prompt_tokens)` runs once the request passed its checks,
        before generation (streaming answers open their response there).

        A session this request created is dropped again when the request fails (or its client
        went away) before anything was recorded: no call, no end reason, no limits set."""
        created = self.sessions.peek(session_id) is None
        session = self.sessions.get(session_id)
        try:
            return await self._chat(session, messages, tools, sampling, max_tokens, on_accepted, client_gone)
        except BaseException:
            if created and not session.calls and not session.reasons and not session.pinned:
                self.sessions.pop(session_id)
                self.router.release(session_id)
            raise

    async def _chat(self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    sampling: dict[str, Any], max_tokens: int | None,
                    on_accepted: Callable[[int], Awaitable[None]] | None,
                    client_gone: Callable[[], bool] | None) -> ChatResult:
        session_id = session.session_id
        tools = tools or None
        norm = session.normalize(messages)
        tkey = session.tools_key(tools)
        parent_call, parent, new_prompt, prompt_ids = self._prompt(session, messages, tools, norm, tkey)

        if any(r.stale for r in self.router.replicas):
            await self._refresh_windows()
        window = self.max_model_len
        room = window - len(prompt_ids)
        budget_left = self._budget_left(session, new_prompt)
        if room <= 0:
            raise self._too_long(session, len(prompt_ids), window)
        limit = max(1, min(x for x in (max_tokens, self.config.max_response_tokens, room, budget_left)
                           if x is not None))
        params = {**self.config.default_sampling, **sampling, **session.sampling_overrides, "max_tokens": limit}
        if session.sampling_overrides.get("seed") is not None:  # a seeded session: a distinct seed per call
            params["seed"] = (int(session.sampling_overrides["seed"]) + len(session.calls)) & 0x7FFFFFFF
        stop_ids = getattr(getattr(self.parser, "_parser", None), "stop_token_ids", None)
        if stop_ids:
            params["stop_token_ids"] = list({*params.get("stop_token_ids", []), *stop_ids})

        if on_accepted is not None:
            await on_accepted(len(prompt_ids))
        started = time.perf_counter()
        try:
            out, replica = await self._complete(session_id, prompt_ids, params)
        except ContextExceededError as exc:  # vLLM's window is smaller than we knew (it restarted)
            await self._refresh_windows()
            raise self._too_long(session, len(prompt_ids), self.max_model_len, exc.message) from None
        except UpstreamStalled as exc:
            self.stats["upstream_stalls"] += 1
            self.stats["upstream_errors"] += 1
            session.add_reason("upstream_timeout")
            raise ProxyError(f"the model server stalled and the call was aborted: {exc.message}",
                             reason="first_token_timeout" if exc.fields.get("first_token") else "token_timeout",
                             ) from exc
        except UpstreamError:
            self.stats["upstream_errors"] += 1
            raise
        latency = time.perf_counter() - started
        completion, logprobs = out["token_ids"], out["logprobs"]
        if len(completion) != len(logprobs):  # never train on misaligned logprobs
            raise UpstreamError(f"vLLM returned {len(completion)} token ids but {len(logprobs)} logprobs",
                                upstream=replica.base_url)

        ended_with_eos = bool(completion) and completion[-1] == self.renderer.eos_id
        body_ids = completion[:-1] if ended_with_eos else completion
        # vLLM's text matches the ids unless stop strings cut it or a length cut split a character.
        upstream_text = out.get("text") if out["finish_reason"] != "length" and not params.get("stop") else None
        text = self.renderer.completion_text(body_ids, upstream_text, ended_with_eos=ended_with_eos)
        parsed: ParsedCompletion = await self.parser.parse(body_ids, text, tools, tkey)

        if client_gone is not None and client_gone():  # nobody will see this answer: do not train on it
            raise asyncio.CancelledError("the client went away before the answer")
        index = len(session.calls)
        session.response_tokens += (len(new_prompt) if index else 0) + len(completion)
        stats = self.stats
        stats["calls"] += 1
        stats["parse_failures"] += parsed.parse_failure
        stats["prompt_tokens"] += len(prompt_ids)
        stats["completion_tokens"] += len(completion)
        stats["upstream_seconds"] += latency
        finish = "tool_calls" if parsed.tool_calls else ("length" if out["finish_reason"] == "length" else "stop")
        session.calls.append(CallRecord(
            index=index, parent=parent_call, prompt_ids=new_prompt,
            completion_ids=completion, logprobs=logprobs, finish_reason=finish,
            tool_calls=[{"name": c["name"], "arguments": c["arguments"]} for c in parsed.tool_calls],
            content=parsed.content, parse_failure=parsed.parse_failure, latency_s=latency, upstream=replica.base_url))
        reply = {"role": "assistant", "content": parsed.content,
                 "tool_calls": [{"function": {"name": c["name"], "arguments": c["arguments"]}}
                                for c in parsed.tool_calls]}
        session.add_chain(Chain(messages=norm + (normalize_message(reply),), tools_key=tkey, last_call=index,
                                ids=prompt_ids + completion, ended_with_eos=ended_with_eos,
                                prompt_len=len(prompt_ids)), replaced=parent)
        return ChatResult(content=parsed.content, tool_calls=parsed.tool_calls, finish_reason=finish,
                          prompt_tokens=len(prompt_ids), completion_tokens=len(completion), call_index=index,
                          parse_failure=parsed.parse_failure)
