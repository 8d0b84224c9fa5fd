"""The proxy's keep-alive HTTP client (proxy -> vLLM hop)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rlkit.proxy._http import ConnectFailed, HttpPool


async def _server(handler) -> tuple[asyncio.Server, str, list[int]]:
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", connections


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    return await reader.readexactly(length)


def test_keep_alive_reuses_one_connection_and_reads_both_body_framings() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            if body == b"chunked":
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                             b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    async def body() -> None:
        server, url, connections = await _server(handler)
        async with server:
            pool = HttpPool(url)
            assert await pool.request("POST", "/v1/completions", b'{"a": 1}') == (201, b'{"a": 1}')
            assert await pool.request("POST", "/x", b"chunked") == (200, b"abcdefg")
            assert await pool.request("GET", "/health") == (201, b"")
            assert len(connections) == 1
            pool.close()
    asyncio.run(body())


def test_a_connection_the_server_closed_is_replaced_transparently() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # like uvicorn's keep-alive timeout, without saying "connection: close"

    async def body() -> None:
        server, url, connections = await _server(handler)
        async with server:
            pool = HttpPool(url)
            for _ in range(3):
                assert await pool.request("POST", "/v1/completions", b"{}") == (200, b"ok")
            assert len(connections) == 3
    asyncio.run(body())


def test_nothing_listening_is_connect_failed_and_slow_is_a_timeout() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused

        async def refused() -> None:
            with pytest.raises(ConnectFailed):
                await HttpPool(f"http://127.0.0.1:{port}").request("GET", "/health")
        asyncio.run(refused())

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the client gives up and closes

    async def slow() -> None:
        server, url, _ = await _server(handler)
        async with server:
            with pytest.raises(TimeoutError):
                await HttpPool(url).request("POST", "/v1/completions", b"{}", timeout_s=0.2)
    asyncio.run(slow())


def test_event_stream_framing_whatever_the_arrival_pieces() -> None:
    """SSE events in chunked transfer, cut anywhere by the network, give the same events."""
    from rlkit.proxy._http import HttpPool, StreamStalled

    events = [b'{"n": %d}' % i for i in range(7)]
    chunks = [b"data: " + e + b"\n\n" for e in events[:3]] + [b"".join(b"data: " + e + b"\n\n" for e in events[3:])]
    chunks.append(b"data: [DONE]\n\n")
    wire = b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"

    async def read(pieces: list[bytes], gap_s: float = 5.0) -> list[bytes]:
        reader = asyncio.StreamReader()

        async def feed() -> None:
            for piece in pieces:
                reader.feed_data(piece)
                await asyncio.sleep(0)

        feeder = asyncio.create_task(feed())
        try:
            return await HttpPool._read_events(reader, 5.0, gap_s)
        finally:
            await feeder

    for size in (1, 3, 17, len(wire)):
        assert asyncio.run(read([wire[i:i + size] for i in range(0, len(wire), size)])) == events
    done = b"%x\r\n%b\r\n0\r\n\r\n" % (len(chunks[-1]), chunks[-1])
    stalled = wire[:-len(done)]  # every token came, then nothing
    with pytest.raises(StreamStalled, match="token timeout") as err:
        asyncio.run(read([stalled], gap_s=0.05))
    assert err.value.events_seen == 7
