"""HTTP front end of the proxy (`ProxyApp`, on `_httpd`, a minimal HTTP/1.1 server); rlkit/proxy/server.py serves it.

Session URL scheme (one session per trial):
    OpenAI base URL     http://HOST:PORT/s/<session>/v1      (.../chat/completions, .../models)
    Anthropic base URL  http://HOST:PORT/s/<session>         (.../v1/messages, .../v1/messages/count_tokens)
Without the /s/<session> prefix the session comes from the API key (Authorization:
Bearer K or x-api-key: K) as `session_for_api_key(K)`; keys themselves are never stored
or logged. Admin endpoints:
    GET  /s/<session>/trajectory         recorded trajectory as JSON (?calls=full|delta|none)
    POST /s/<session>/sampling           JSON object of sampling overrides for the session
                                         (merged; ?replace=1 replaces; a null value removes a key)
    POST /s/<session>/limits             {"max_calls": N, "max_response_tokens": N}: the session's budgets;
                                         past one, calls get a 400 (session_budget_exceeded) and the
                                         trajectory the reason call_limit or response_budget
    POST /s/<session>/close              drop the session, answer its final trajectory
    GET  /sessions, GET /stats (counters)
    GET  /health                         every backend (url, up, models, max_model_len); 503 unless one
                                         serves the configured model
    GET|HEAD / and /s/<session>          200 (clients' preconnect); creates no session
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import orjson

from rlkit.errors import ContextExceededError, ProxyError, SessionBudgetError
from rlkit.proxy import anthropic, formats
from rlkit.proxy._httpd import Router, StreamResponse, json_response
from rlkit.proxy.core import ProxyCore, pick_sampling
from rlkit.proxy.session import session_for_api_key

log = logging.getLogger("rlkit.proxy")
DEFAULT_SESSION = "default"


def _session_id(request: Any) -> str:
    sid = request.match_info.get("session")
    if sid:
        return sid
    auth = request.headers.get("authorization", "")
    key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    return session_for_api_key(key) if key else DEFAULT_SESSION


def _openai_overflow(exc: ContextExceededError) -> str:
    """OpenAI's own wording of an overflow (what OpenAI-speaking clients match on)."""
    window, prompt = exc.fields.get("max_tokens"), exc.fields.get("prompt_tokens")
    if window is None or prompt is None:
        return exc.message
    return (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{prompt} tokens. Please reduce the length of the messages. ({exc.message})")


class _EarlyStream:
    """An SSE answer opened as soon as the request is accepted and kept alive while generating.

    Tool calls can only be parsed from the whole completion, so the body arrives at the
    end; opening early (plus keep-alives) stops clients' idle timeouts on long generations.
    Errors found before opening are plain JSON errors with their status code.
    """

    def __init__(self, request: Any, head: Callable[[int], bytes], keepalive: bytes, interval_s: float) -> None:
        self.request = request
        self.head = head
        self.keepalive = keepalive
        self.interval_s = interval_s
        self.response: Any = None
        self._pinger: asyncio.Task[None] | None = None

    async def open(self, prompt_tokens: int) -> None:
        self.response = StreamResponse(status=200, headers={"content-type": "text/event-stream",
                                                            "cache-control": "no-cache"})
        await self.response.prepare(self.request)
        await self.response.write(self.head(prompt_tokens))
        self._pinger = asyncio.create_task(self._ping())

    async def _ping(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.response.write(self.keepalive)

    async def finish(self, payload: bytes) -> Any:
        if self._pinger is not None:
            self._pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self._pinger
        with contextlib.suppress(ConnectionError):
            await self.response.write(payload)
            await self.response.write_eof()
        return self.response


class ProxyApp:
    """Route handlers over one ProxyCore."""

    def __init__(self, core: ProxyCore) -> None:
        self.core = core

    @property
    def model_name(self) -> str:
        return self.core.config.served_model_name or self.core.config.model_path

    def build(self) -> Router:
        router = Router()
        for prefix in ("", "/s/{session}"):
            router.add("POST", prefix + "/v1/chat/completions", self.chat_completions)
            router.add("POST", prefix + "/v1/messages", self.messages)
            router.add("POST", prefix + "/v1/messages/count_tokens", self.count_tokens)
            router.add("GET", prefix + "/v1/models", self.models)
        router.add("GET", "/s/{session}/trajectory", self.trajectory)
        router.add("POST", "/s/{session}/sampling", self.sampling)
        router.add("POST", "/s/{session}/limits", self.limits)
        router.add("POST", "/s/{session}/close", self.close)
        router.add("GET", "/sessions", self.sessions)
        router.add("GET", "/health", self.health)
        router.add("GET", "/", self.ping)
        router.add("GET", "/s/{session}", self.ping)
        router.add("GET", "/stats", self.stats)
        return router

    async def health(self, request: Any) -> Any:
        """Each backend (url, up, models served, max_model_len); 200 only while one of them serves
        the configured model: a proxy whose backends are gone, or serve another model, is not healthy."""
        replicas = self.core.router.replicas
        backends = await asyncio.gather(*(self.core.client.describe(r) for r in replicas))
        for replica, backend in zip(replicas, backends, strict=True):
            if not backend["up"]:
                self.core.router.mark_down(replica)
            elif replica.down_until:  # back: its window was just read again
                replica.down_until = 0.0
        serving = [b for b in backends if b["serves_model"]]
        ok = bool(serving)
        reason = None if ok else (
            "no backend answers" if not any(b["up"] for b in backends)
            else f"no backend serves {self.core.client.model_name}")
        return json_response({"status": "ok" if ok else "unhealthy", "reason": reason, "pid": os.getpid(),
                              "model": self.core.client.model_name, "max_model_len": self.core.max_model_len,
                              "backends": backends,
                              "upstreams": {b["url"]: b["serves_model"] for b in backends}},
                             200 if ok else 503)

    async def ping(self, request: Any) -> Any:
        """HEAD/GET of a base URL (Claude Code preconnects to it): the proxy answers, nothing else."""
        return json_response({"status": "ok"})

    async def stats(self, request: Any) -> Any:
        return json_response({**self.core.stats, "sessions": len(self.core.sessions.ids()),
                              "parser_check": self.core.parser_check,
                              "in_flight": {r.base_url: r.in_flight for r in self.core.router.replicas}})

    async def models(self, request: Any) -> Any:
        return json_response({"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "rlkit",
                                                          "type": "model", "display_name": self.model_name}]})

    async def sessions(self, request: Any) -> Any:
        return json_response({"sessions": self.core.sessions.ids()})

    async def trajectory(self, request: Any) -> Any:
        calls = request.query.get("calls", "full")
        if calls not in ("full", "delta", "none"):
            return json_response({"error": {"message": "calls must be full, delta or none", "type": "invalid_request_error"}},
                                 400)
        data = self.core.trajectory(request.match_info["session"], calls=calls)
        if data is None:
            return json_response({"error": {"message": "no such session", "type": "not_found"}}, 404)
        return json_response(data)

    async def sampling(self, request: Any) -> Any:
        body = orjson.loads(await request.read() or b"{}")
        if not isinstance(body, dict):
            return json_response({"error": {"message": "expected a JSON object", "type": "invalid_request_error"}}, 400)
        sid = request.match_info["session"]
        self.core.set_session_sampling(sid, body, replace=request.query.get("replace", "0") == "1")
        return json_response({"session_id": sid, "sampling_overrides": self.core.sessions.get(sid).sampling_overrides})

    async def limits(self, request: Any) -> Any:
        try:
            body = orjson.loads(await request.read() or b"{}")
            limits = self.core.set_session_limits(request.match_info["session"], **body)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return json_response({"error": {"message": "expected {\"max_calls\": N, \"max_response_tokens\": N}",
                                            "type": "invalid_request_error"}}, 400)
        return json_response({"session_id": request.match_info["session"], "limits": limits})

    async def close(self, request: Any) -> Any:
        calls = request.query.get("calls", "full")
        data = self.core.close_session(request.match_info["session"],
                                       calls=calls if calls in ("full", "delta", "none") else "full")
        if data is None:
            return json_response({"error": {"message": "no such session", "type": "not_found"}}, 404)
        return json_response(data)

    async def chat_completions(self, request: Any) -> Any:
        try:
            body = orjson.loads(await request.read())
            messages = body["messages"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return json_response(formats.openai_error("body must be a JSON object with 'messages'",
                                                      kind="invalid_request_error"), 400)
        model = body.get("model") or self.model_name
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        stream = None
        if body.get("stream"):
            stream_id = formats.new_stream_id("openai")
            stream = _EarlyStream(request, lambda _: formats.openai_stream_head(model, stream_id),
                                  formats.OPENAI_KEEPALIVE, self.core.config.stream_keepalive_s)
        try:
            result = await self.core.chat(_session_id(request), messages, body.get("tools"), pick_sampling(body),
                                          max_tokens, on_accepted=stream.open if stream else None,
                                          client_gone=request.client_gone)
        except ContextExceededError as exc:
            message = _openai_overflow(exc)
            if stream is not None and stream.response is not None:
                return await stream.finish(formats.openai_stream_error(
                    message, kind="invalid_request_error", code="context_length_exceeded"))
            return json_response(formats.openai_error(message, kind="invalid_request_error",
                                                      code="context_length_exceeded", param="messages"), 400)
        except SessionBudgetError as exc:  # a 400: clients do not retry it, so the episode ends
            return json_response(formats.openai_error(exc.message, kind="invalid_request_error",
                                                      code="session_budget_exceeded"), 400)
        except ProxyError as exc:
            log.warning("upstream error: %s", exc.message)
            if stream is not None and stream.response is not None:
                return await stream.finish(formats.openai_stream_error(exc.message, kind="upstream_error"))
            return json_response(formats.openai_error(exc.message, kind="upstream_error"), 502)
        if stream is not None:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await stream.finish(b"".join(formats.openai_stream(
                result, model, include_usage=include_usage, stream_id=stream_id, head=False)))
        return json_response(formats.openai_response(result, model))

    async def messages(self, request: Any) -> Any:
        try:
            body = orjson.loads(await request.read())
            messages, tools, name_map = anthropic.to_openai(body)
        except Exception as exc:  # noqa: BLE001 - any malformed body is the client's 400
            return json_response(formats.anthropic_error(f"invalid request: {exc}", kind="invalid_request_error"), 400)
        model = body.get("model") or self.model_name
        stream = None
        if body.get("stream"):
            stream_id = formats.new_stream_id("anthropic")
            stream = _EarlyStream(request, lambda n: formats.anthropic_stream_head(model, stream_id, n),
                                  formats.ANTHROPIC_PING, self.core.config.stream_keepalive_s)
        try:
            result = await self.core.chat(_session_id(request), messages, tools, anthropic.sampling(body),
                                          body.get("max_tokens"), on_accepted=stream.open if stream else None,
                                          client_gone=request.client_gone)
        except ContextExceededError as exc:
            if stream is not None and stream.response is not None:
                return await stream.finish(formats.anthropic_stream_error(exc.message, kind="invalid_request_error"))
            return json_response(formats.anthropic_error(exc.message, kind="invalid_request_error"), 400)
        except SessionBudgetError as exc:
            return json_response(formats.anthropic_error(exc.message, kind="invalid_request_error"), 400)
        except ProxyError as exc:
            log.warning("upstream error: %s", exc.message)
            if stream is not None and stream.response is not None:
                return await stream.finish(formats.anthropic_stream_error(exc.message, kind="api_error"))
            return json_response(formats.anthropic_error(exc.message, kind="api_error"), 502)
        if name_map:
            for call in result.tool_calls:
                call["name"] = name_map.get(call["name"], call["name"])
        if stream is not None:
            return await stream.finish(b"".join(formats.anthropic_stream(result, model, stream_id=stream_id,
                                                                         head=False)))
        return json_response(formats.anthropic_response(result, model))

    async def count_tokens(self, request: Any) -> Any:
        try:
            messages, tools, _ = anthropic.to_openai(orjson.loads(await request.read()))
        except Exception as exc:  # noqa: BLE001 - any malformed body is the client's 400
            return json_response(formats.anthropic_error(f"invalid request: {exc}", kind="invalid_request_error"), 400)
        return json_response({"input_tokens": self.core.count_tokens(messages, tools)})
