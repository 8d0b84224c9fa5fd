"""A scripted stand-in for vLLM's /v1/completions, for unit tests of the proxy.

It answers with token ids chosen by the test and records every request body, so
tests can check exactly which prompt ids and sampling params the proxy sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

Reply = Callable[[list[int], dict[str, Any]], list[int]]


class FakeVllm:
    def __init__(self, reply: Reply, *, model: str = "tiny", max_model_len: int = 8192,
                 finish_reason: str = "stop", delay_s: float = 0.0, status: int = 200,
                 text: Callable[[list[int]], str] | None = None, stream: bool = False,
                 stall_after: int | None = None, stall_s: float = 0.0) -> None:
        self.reply = reply
        # stream=True answers `"stream": true` requests as vLLM does (one SSE chunk per token);
        # after `stall_after` tokens it stops for `stall_s` (a hung engine mid-generation).
        self.stream = stream
        self.stall_after = stall_after
        self.stall_s = stall_s
        self.error_text = "engine died"  # the body of a non-200 answer
        self.aborted = 0  # streamed answers whose client (the proxy) hung up
        self.text = text  # the completion's text, as vLLM detokenizes it (default: none sent)
        self.model = model
        self.max_model_len = max_model_len
        self.finish_reason = finish_reason
        self.delay_s = delay_s
        self.status = status
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def _completions(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return web.Response(status=self.status, text=self.error_text)
        ids = self.reply(body["prompt"], body)
        if self.stream and body.get("stream"):
            return await self._stream(request, ids)
        choice = {"index": 0, "text": self.text(ids) if self.text else "", "token_ids": ids, "finish_reason": self.finish_reason,
                  "logprobs": {"token_logprobs": [-0.5 - 0.01 * i for i in range(len(ids))]}}
        return web.Response(body=orjson.dumps({"choices": [choice], "prompt_token_ids": body["prompt"]}),
                            content_type="application/json")

    async def _stream(self, request: web.Request, ids: list[int]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i, token in enumerate(ids):
                if self.stall_after is not None and i == self.stall_after:
                    await asyncio.sleep(self.stall_s)
                last = i == len(ids) - 1
                choice = {"index": 0, "text": "", "token_ids": [token], "logprobs": {"token_logprobs": [-0.5]},
                          "finish_reason": self.finish_reason if last else None}
                await response.write(b"data: " + orjson.dumps({"choices": [choice]}) + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.aborted += 1
            raise
        return response

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": self.model, "max_model_len": self.max_model_len}]})

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakeVllm]:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self._runner = runner
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Go away (idempotent), as a crashed vLLM would."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
