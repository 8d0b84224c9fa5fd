"""The proxy's per-trial clients share one TLS context instead of loading the CA bundle each time."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlkit.scaffolds.tls import tls_context


class _Record(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"calls": [], "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def record_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_three_record_fetches_load_the_ca_bundle_at_most_once(record_server: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Here, not at the top: every test worker collects this file, and harbor's agents import litellm (4 s).
    # Before the count starts: litellm's import builds an SSL context of its own.
    from rlkit.scaffolds._agents import fetch_session_record

    loads: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    tls_context.cache_clear()

    async def fetch() -> list[dict | None]:
        return [await fetch_session_record(f"{record_server}/s/t{i}/record") for i in range(3)]

    records = asyncio.run(fetch())
    assert [r and r["path"] for r in records] == ["/s/t0/record", "/s/t1/record", "/s/t2/record"]
    assert len(loads) <= 1
    assert tls_context().verify_mode is ssl.CERT_REQUIRED  # verifies as httpx's default does
