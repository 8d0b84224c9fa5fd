"""Small blocking JSON-over-HTTP calls to vLLM and the proxy (loopback, stdlib only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class HttpStatusError(Exception):
    """A non-2xx answer (status and body kept for the caller's message)."""

    def __init__(self, url: str, status: int, body: str) -> None:
        super().__init__(f"{url} answered {status}: {body[:500]}")
        self.url = url
        self.status = status
        self.body = body


def request_json(method: str, url: str, body: Any = None, *, timeout_s: float = 60.0) -> Any:
    """Send JSON (or nothing), return the decoded answer (None for an empty body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise HttpStatusError(url, exc.code, exc.read().decode(errors="replace")) from None
    return json.loads(raw) if raw.strip() else None


def post_json(url: str, body: Any = None, *, timeout_s: float = 60.0) -> Any:
    return request_json("POST", url, {} if body is None else body, timeout_s=timeout_s)


def get_json(url: str, *, timeout_s: float = 60.0) -> Any:
    return request_json("GET", url, timeout_s=timeout_s)
