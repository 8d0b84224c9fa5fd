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
                 text: Callable[[list[int]], str] | None = None) -> None:
        self.reply = reply
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
            return web.Response(status=self.status, text="engine died")
        ids = self.reply(body["prompt"], body)
        choice = {"index": 0, "text": self.text(ids) if self.text else "", "token_ids": ids, "finish_reason": self.finish_reason,
                  "logprobs": {"token_logprobs": [-0.5 - 0.01 * i for i in range(len(ids))]}}
        return web.Response(body=orjson.dumps({"choices": [choice], "prompt_token_ids": body["prompt"]}),
                            content_type="application/json")

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
