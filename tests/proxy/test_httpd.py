"""The proxy's front-end HTTP/1.1 server, spoken to over raw sockets and with a stock client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp

from rlkit.proxy._httpd import HttpServer, Request, Router, StreamResponse, json_response


def _router() -> Router:
    router = Router()

    async def echo(request: Request) -> object:
        return json_response({"method": request.method, "body": (await request.read()).decode(),
                              "session": request.match_info.get("session"), "query": request.query,
                              "auth": request.headers.get("authorization")})

    async def boom(request: Request) -> object:
        raise RuntimeError("handler bug")

    async def stream(request: Request) -> object:
        response = StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i in range(3):
            await response.write(f"data: {i}\n\n".encode())
        await response.write_eof()
        return response

    router.add("POST", "/echo", echo)
    router.add("POST", "/s/{session}/echo", echo)
    router.add("GET", "/boom", boom)
    router.add("GET", "/stream", stream)
    return router


async def _serve() -> tuple[HttpServer, int]:
    server = HttpServer(_router(), max_body=1 << 20)
    return server, await server.start("127.0.0.1", 0)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, headers, body
        body += chunk[:-2]


def _on_connection(body: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
    async def run() -> None:
        server, port = await _serve()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.wait_for(body(reader, writer), 30)
        finally:
            writer.close()
            await server.stop()

    asyncio.run(run())


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_keep_alive_and_pipelined_requests_answer_in_order() -> None:
    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post("/echo", b"one") + _post("/s/trial%2F7/echo?calls=delta", b"two", "Authorization: Bearer k\r\n"))
        first = await _read_response(reader)
        second = await _read_response(reader)
        assert first[0] == 200 and json.loads(first[2])["body"] == "one"
        data = json.loads(second[2])
        assert data == {"method": "POST", "body": "two", "session": "trial/7", "query": {"calls": "delta"},
                        "auth": "Bearer k"}
        writer.write(_post("/echo", b"three"))  # same connection, later
        assert json.loads((await _read_response(reader))[2])["body"] == "three"

    _on_connection(body)


def test_body_split_across_packets_chunked_bodies_and_expect_continue() -> None:
    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raw = _post("/echo", b"x" * 5000)
        for i in range(0, len(raw), 700):
            writer.write(raw[i:i + 700])
            await writer.drain()
            await asyncio.sleep(0)
        assert json.loads((await _read_response(reader))[2])["body"] == "x" * 5000

        writer.write(b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n")
        assert json.loads((await _read_response(reader))[2])["body"] == "abcde"

        writer.write(b"POST /echo HTTP/1.1\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n")
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"body")
        assert json.loads((await _read_response(reader))[2])["body"] == "body"

    _on_connection(body)


def test_unknown_path_wrong_method_and_handler_error_keep_the_connection() -> None:
    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /nope HTTP/1.1\r\n\r\n")
        assert (await _read_response(reader))[0] == 404
        writer.write(b"GET /echo HTTP/1.1\r\n\r\n")
        assert (await _read_response(reader))[0] == 405
        writer.write(b"GET /boom HTTP/1.1\r\n\r\n")
        status, _, body = await _read_response(reader)
        assert status == 500 and "handler bug" in json.loads(body)["error"]["message"]
        writer.write(_post("/echo", b"still here"))
        assert json.loads((await _read_response(reader))[2])["body"] == "still here"

    _on_connection(body)


def test_streamed_answer_is_chunked_and_the_connection_is_reused() -> None:
    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /stream HTTP/1.1\r\n\r\n")
        status, headers, body = await _read_response(reader)
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        writer.write(_post("/echo", b"after"))
        assert json.loads((await _read_response(reader))[2])["body"] == "after"

    _on_connection(body)


def test_connection_close_too_large_and_malformed_requests() -> None:
    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_post("/echo", b"bye", "connection: close\r\n"))
        status, headers, _ = await _read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await reader.read() == b""  # closed by the server

        server, port = await _serve()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /echo HTTP/1.1\r\ncontent-length: 99999999\r\n\r\n")
            assert (await _read_response(reader))[0] == 413
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /echo HTTP/1.1\r\ncontent-length: many\r\n\r\n")
            assert (await _read_response(reader))[0] == 400
            writer.close()
        finally:
            await server.stop()

    _on_connection(body)


def test_a_stock_client_streams_and_posts() -> None:
    async def body() -> None:
        server, port = await _serve()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{port}/s/abc/echo", json={"a": 1}) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["session"] == "abc"
                async with http.get(f"http://127.0.0.1:{port}/stream") as resp:
                    assert [line async for line in resp.content if line.strip()] == [b"data: 0\n", b"data: 1\n",
                                                                                      b"data: 2\n"]
        finally:
            await server.stop()

    asyncio.run(body())


def test_stop_closes_open_connections() -> None:
    async def body() -> None:
        server, port = await _serve()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_post("/echo", b"x"))
        await _read_response(reader)
        await server.stop()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert not server.connections

    asyncio.run(body())
