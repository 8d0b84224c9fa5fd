"""A minimal HTTP/1.1 server for the proxy's front end, on asyncio's Protocol API.

Every agent call crosses it. A general framework (aiohttp) spends about half of a call's
added latency in its request/response machinery; this one does only what the proxy's
routes need: JSON bodies (Content-Length or chunked), keep-alive, `Expect: 100-continue`,
and chunked streaming answers (SSE). Handlers are `async def handler(request) -> Response`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, unquote

import orjson

log = logging.getLogger("rlkit.proxy")

MAX_HEAD = 64 * 1024
IDLE_TIMEOUT_S = 300.0
_REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            413: "Payload Too Large", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


class Request:
    __slots__ = ("_conn", "body", "headers", "keep_alive", "match_info", "method", "path", "query")

    def __init__(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes,
                 conn: _Connection, keep_alive: bool = True) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # names lower-cased
        self.body = body
        self.match_info: dict[str, str] = {}
        self.keep_alive = keep_alive
        self._conn = conn

    async def read(self) -> bytes:
        return self.body

    def client_gone(self) -> bool:
        """The client closed its connection (nothing sent now would reach it)."""
        return self._conn.closed


class Response:
    __slots__ = ("body", "content_type", "status")

    def __init__(self, body: bytes = b"", status: int = 200, content_type: str = "application/json") -> None:
        self.body = body
        self.status = status
        self.content_type = content_type


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status)


class StreamResponse:
    """A chunked answer written piece by piece; the handler returns it once written."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = headers or {}
        self._conn: _Connection | None = None

    async def prepare(self, request: Request) -> None:
        self._conn = request._conn
        head = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'OK')}", "transfer-encoding: chunked"]
        head += [f"{k}: {v}" for k, v in self.headers.items()]
        if self._conn.close_after:
            head.append("connection: close")
        self._conn.send(("\r\n".join(head) + "\r\n\r\n").encode())
        self._conn.streaming = True

    async def write(self, data: bytes) -> None:
        if data and self._conn is not None:
            if self._conn.closed:
                raise ConnectionResetError("client went away")
            self._conn.send(b"%x\r\n%b\r\n" % (len(data), data))
            await self._conn.drain()

    async def write_eof(self) -> None:
        if self._conn is not None:
            self._conn.send(b"0\r\n\r\n")
            self._conn.streaming = False


Handler = Callable[[Request], Awaitable[Any]]


class Router:
    """Exact paths, plus `/s/<session>` + path (the session goes to match_info["session"])."""

    def __init__(self) -> None:
        self.plain: dict[tuple[str, str], Handler] = {}
        self.session: dict[tuple[str, str], Handler] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        if path.startswith("/s/{session}"):
            self.session[(method, path[len("/s/{session}"):])] = handler
        else:
            self.plain[(method, path)] = handler

    def resolve(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], bool]:
        """(handler, match_info, path known under another method)."""
        table, key, info = self.plain, path, {}
        if path.startswith("/s/"):
            sid, slash, rest = path[3:].partition("/")
            if sid:
                table, key, info = self.session, slash + rest, {"session": unquote(sid)}
        handler = table.get((method, key))
        if handler is None and method == "HEAD":
            handler = table.get(("GET", key))
        return handler, info, handler is None and any(k == key for _, k in table)


def _chunked_body(buf: bytearray, pos: int, limit: int) -> tuple[bytes, int] | None:
    """(body, end) of a complete chunked body starting at `pos`, or None if more data is needed."""
    parts = []
    total = 0
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol)
            if end < 0:
                return None
            return b"".join(parts), end + 4
        if eol + 2 + size + 2 > len(buf):
            return None
        total += size
        if total > limit:
            raise _TooLarge()
        parts.append(bytes(buf[eol + 2:eol + 2 + size]))
        pos = eol + 2 + size + 2


class _BadRequest(Exception):
    pass


class _TooLarge(Exception):
    pass


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.pending: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.close_after = False  # the request being answered asked for Connection: close
        self.streaming = False
        self._can_write: asyncio.Future[None] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._continued = False

    # --- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.task is not None and not self.task.done():
            # The client went away mid-request: stop its handler, which closes the vLLM
            # connection (vLLM then aborts the generation) and records nothing.
            self.task.cancel()
        if self._idle is not None:
            self._idle.cancel()
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)

    def pause_writing(self) -> None:
        self._can_write = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        self._can_write = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            while (request := self._parse()) is not None:
                self.pending.append(request)
        except _TooLarge:
            self._fail(413, "request body too large")
            return
        except (_BadRequest, ValueError, IndexError) as exc:
            self._fail(400, f"malformed HTTP request: {exc}")
            return
        if self.pending and self.task is None:
            # Started eagerly: the handler runs now, up to its first wait (the vLLM call),
            # instead of one event-loop turn later.
            task = asyncio.eager_task_factory(asyncio.get_running_loop(), self._serve())
            self.task = None if task.done() else task

    # --- parsing -----------------------------------------------------------------------------------

    def _parse(self) -> Request | None:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _BadRequest("header section too large")
            return None
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        limit = self.server.max_body
        if "chunked" in headers.get("transfer-encoding", "").lower():
            if headers.get("expect", "").lower() == "100-continue":
                self._continue()
            parsed = _chunked_body(buf, start, limit)
            if parsed is None:
                return None
            body, stop = parsed
        else:
            length = int(headers.get("content-length", "0") or 0)
            if length > limit:
                raise _TooLarge()
            if len(buf) - start < length:
                if length and headers.get("expect", "").lower() == "100-continue":
                    self._continue()
                return None
            body, stop = bytes(buf[start:start + length]), start + length
        del buf[:stop]
        self._continued = False
        path, _, qs = target.partition("?")
        keep = (headers.get("connection", "").lower() != "close" if version == "HTTP/1.1"
                else headers.get("connection", "").lower() == "keep-alive")
        return Request(method, path, dict(parse_qsl(qs)) if qs else {}, headers, body, self, keep)

    def _continue(self) -> None:
        if not self._continued and self.transport is not None:
            self._continued = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # --- answering ---------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if not self.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def drain(self) -> None:
        if self._can_write is not None:
            await self._can_write

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT_S, self._on_idle)

    def _on_idle(self) -> None:
        if self.task is None and self.transport is not None:
            self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})
        self.send(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
                  % (status, _REASONS.get(status, "Error").encode(), len(body), body))
        if self.transport is not None:
            self.transport.close()

    async def _serve(self) -> None:
        try:
            while self.pending and not self.closed:
                request = self.pending.popleft()
                keep = request.keep_alive
                self.close_after = not keep
                response = await self._answer(request)
                if isinstance(response, Response):
                    head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (
                        response.status, _REASONS.get(response.status, "OK").encode(),
                        response.content_type.encode(), len(response.body))
                    self.send(head + (b"\r\n" if keep else b"connection: close\r\n\r\n")
                              + (b"" if request.method == "HEAD" else response.body))
                elif self.streaming:  # a stream the handler did not finish: it cannot be reused
                    keep = False
                if not keep:
                    if self.transport is not None:
                        self.transport.close()
                    return
                self._arm_idle()
        finally:
            self.task = None

    async def _answer(self, request: Request) -> Any:
        handler, info, other_method = self.server.router.resolve(request.method, request.path)
        if handler is None:
            status = 405 if other_method else 404
            return json_response({"error": {"message": f"{request.method} {request.path}: "
                                            f"{_REASONS[status].lower()}", "type": "not_found"}}, status)
        request.match_info.update(info)
        try:
            return await handler(request)
        except ConnectionError:
            return None
        except Exception as exc:  # one request's bug must not take the connection's others down
            log.exception("proxy handler %s %s failed", request.method, request.path)
            if self.streaming:
                return None
            return json_response({"error": {"message": f"internal error: {exc!r}", "type": "server_error"}}, 500)


class HttpServer:
    def __init__(self, router: Router, *, max_body: int = 256 * 1024 * 1024) -> None:
        self.router = router
        self.max_body = max_body
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; answers the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, reuse_address=True,
                                                backlog=2048)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            if conn.task is not None:
                conn.task.cancel()
            if conn.transport is not None:
                conn.transport.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 10)
        self._server = None
