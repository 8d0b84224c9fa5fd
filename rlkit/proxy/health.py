"""`probe_proxy`: is the proxy at a URL the one a launch needs, serving the right model now?

A launch must never trust whatever answers on the proxy's port: a proxy left over from an
earlier run may front dead backends or another model. The probe reads `/health` (which asks
every backend afresh) and accepts only a proxy whose backends serve `model`, and, when the
launcher knows it, whose process is the one it started (`pid`). Blocking, stdlib only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from rlkit.errors import UpstreamError


class ProxyUnhealthy(UpstreamError):
    """The proxy at a URL cannot serve the launch: unreachable, stale, or its backends are gone."""

    retryable = False


def read_health(url: str, timeout_s: float = 10.0) -> tuple[int, dict[str, Any]]:
    """(status, body) of `GET <url>/health`; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError) as exc:
        return 0, {"reason": f"no answer: {exc}"}


def verdict(status: int, health: dict[str, Any], model: str, pid: int | None = None) -> str | None:
    """Why this /health answer is not good enough (None: it is)."""
    if status == 0:
        return health.get("reason") or "the proxy does not answer"
    if "backends" not in health:
        return "not an rlkit proxy of this version (its /health lists no backends)"
    if pid is not None and health.get("pid") != pid:
        return f"another process answers (pid {health.get('pid')}, expected {pid}): a stale proxy from an earlier run?"
    if health.get("model") != model:
        return f"it serves {health.get('model')!r}, not {model!r}: a stale proxy from an earlier run?"
    if status != 200 or health.get("status") != "ok":
        backends = "; ".join(f"{b.get('url')}: {b.get('error') or 'up'}" for b in health.get("backends") or [])
        return f"{health.get('reason') or 'unhealthy'} ({backends or 'no backends'})"
    return None


def probe_proxy(url: str, model: str, *, pid: int | None = None, wait_s: float = 0.0,
                interval_s: float = 1.0, timeout_s: float = 10.0) -> dict[str, Any]:
    """The proxy's /health once it is healthy for `model` (within `wait_s`), else ProxyUnhealthy."""
    deadline = time.monotonic() + wait_s
    while True:
        status, health = read_health(url, timeout_s)
        why = verdict(status, health, model, pid)
        if why is None:
            return health
        if time.monotonic() >= deadline:
            raise ProxyUnhealthy(f"proxy at {url} refused for {model}: {why}", url=url, model=model)
        time.sleep(interval_s)
