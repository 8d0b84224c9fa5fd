"""The proxy served: `ProxyServer` on a running event loop, `serve_forever` (what `rlkit proxy serve` runs)
and `BackgroundProxy` (its own loop in a thread, for synchronous callers). The URL scheme is in
rlkit/proxy/app.py."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
from typing import Any, Self

from rlkit.proxy import anthropic
from rlkit.proxy._httpd import HttpServer
from rlkit.proxy.app import ProxyApp
from rlkit.proxy.core import ProxyConfig, ProxyCore
from rlkit.proxy.toolcalls import ProxyEventLoop

__all__ = ["BackgroundProxy", "ProxyEventLoop", "ProxyServer", "serve_forever"]

log = logging.getLogger("rlkit.proxy")


class ProxyServer:
    """The proxy, served in-process on the running event loop.

        async with ProxyServer(ProxyConfig(model_path=..., upstreams=[...], port=0)) as proxy:
            base = proxy.openai_base_url("trial-1")      # http://127.0.0.1:PORT/s/trial-1/v1
            ... run the agent ...
            traj = proxy.close_session("trial-1")
    """

    def __init__(self, config: ProxyConfig, *, core: ProxyCore | None = None) -> None:
        self.config = config
        self._core = core  # built in start(): loading the tokenizer and verl's parser takes seconds
        self.port = config.port
        self._http: HttpServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def session_url(self, session_id: str) -> str:
        return f"{self.url}/s/{session_id}"

    def openai_base_url(self, session_id: str) -> str:
        return self.session_url(session_id) + "/v1"

    def anthropic_base_url(self, session_id: str) -> str:
        return self.session_url(session_id)

    @property
    def core(self) -> ProxyCore:
        if self._core is None:
            raise RuntimeError("the proxy is not started")
        return self._core

    async def start(self) -> ProxyServer:
        loop = asyncio.get_running_loop()
        if self._core is None:  # off the loop: tokenizer + verl imports would stall other tasks
            self._core = await loop.run_in_executor(None, ProxyCore, self.config)
        if self.config.warm_anthropic:
            await loop.run_in_executor(None, anthropic.warm_up)
        await self.core.start()
        self._http = HttpServer(ProxyApp(self.core).build())
        try:
            self.port = await self._http.start(self.config.host, self.config.port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            from rlkit.errors import UserError

            raise UserError(f"port {self.config.port} on {self.config.host} is already in use (a proxy left over "
                            "from an earlier run?)", key="port",
                            fix="run `bash scripts/cleanup_before_run.sh`, or pick another --port") from exc
        log.info("proxy listening on %s -> %s", self.url, ", ".join(self.config.upstreams))
        return self

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._core is not None:
            await self._core.close()

    async def __aenter__(self) -> Self:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # in-process session API
    def trajectory(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        """Segments + flags (+ per-call records, see Session.trajectory) of a live session."""
        return self.core.trajectory(session_id, calls=calls)

    def close_session(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        """Drop a session (frees its memory and replica slot) and return its final trajectory."""
        return self.core.close_session(session_id, calls=calls)

    def set_session_sampling(self, session_id: str, overrides: dict[str, Any], *, replace: bool = False) -> None:
        self.core.set_session_sampling(session_id, overrides, replace=replace)

    def set_session_limits(self, session_id: str, *, max_calls: int | None = None,
                           max_response_tokens: int | None = None) -> dict[str, int]:
        return self.core.set_session_limits(session_id, max_calls=max_calls, max_response_tokens=max_response_tokens)


async def serve_forever(config: ProxyConfig) -> None:
    """Serve until cancelled; run it on a `ProxyEventLoop` (`asyncio.run(..., loop_factory=ProxyEventLoop)`)."""
    async with ProxyServer(config) as proxy:
        # Tokenizer, verl, torch and ray make a heap of millions of objects: a full collection
        # over it stalls every call for 100+ ms. Frozen objects are never scanned again.
        gc.collect()
        gc.freeze()
        print(f"rlkit proxy on {proxy.url}  (OpenAI base {proxy.url}/s/<session>/v1, "
              f"Anthropic base {proxy.url}/s/<session>)", flush=True)
        await asyncio.Event().wait()


class BackgroundProxy:
    """The proxy on its own event loop in a daemon thread, for synchronous callers.

        with BackgroundProxy(ProxyConfig(...)) as proxy:
            env = {"ANTHROPIC_BASE_URL": proxy.anthropic_base_url("trial-1")}
            ...
            record = proxy.close_session("trial-1")

    Session calls are executed on the proxy's loop, so they never race with requests.
    """

    def __init__(self, config: ProxyConfig, *, start_timeout_s: float = 300.0) -> None:
        self.server = ProxyServer(config)
        self._timeout = start_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: Any = None

    def start(self) -> BackgroundProxy:
        import threading

        self._loop = ProxyEventLoop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlkit-proxy", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(self._timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()
            self._loop = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _on_loop(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            return fn(*args, **kwargs)

        assert self._loop is not None, "proxy not started"
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(60)

    @property
    def url(self) -> str:
        return self.server.url

    def openai_base_url(self, session_id: str) -> str:
        return self.server.openai_base_url(session_id)

    def anthropic_base_url(self, session_id: str) -> str:
        return self.server.anthropic_base_url(session_id)

    def trajectory(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        return self._on_loop(self.server.trajectory, session_id, calls=calls)

    def close_session(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        return self._on_loop(self.server.close_session, session_id, calls=calls)

    def set_session_sampling(self, session_id: str, overrides: dict[str, Any], *, replace: bool = False) -> None:
        self._on_loop(self.server.set_session_sampling, session_id, overrides, replace=replace)

    def set_session_limits(self, session_id: str, *, max_calls: int | None = None,
                           max_response_tokens: int | None = None) -> dict[str, int]:
        return self._on_loop(self.server.set_session_limits, session_id, max_calls=max_calls,
                             max_response_tokens=max_response_tokens)
