"""rlkit.proxy: the token-recording proxy between agent scaffolds and vLLM.

Agents talk OpenAI Chat Completions or Anthropic Messages to the proxy; the proxy
renders the chat template itself, calls vLLM's /v1/completions with token ids, parses
tool calls with verl's parser, and records per session the exact ids and logprobs.
See rlkit/proxy/app.py for the session URL scheme.

Names are imported lazily so `import rlkit.proxy` stays cheap.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "ProxyServer": "rlkit.proxy.server",
    "BackgroundProxy": "rlkit.proxy.server",
    "ProxyConfig": "rlkit.proxy.core",
    "ProxyCore": "rlkit.proxy.core",
    "session_for_api_key": "rlkit.proxy.session",
    "assemble": "rlkit.proxy.trajectory",
    "CallRecord": "rlkit.proxy.trajectory",
    "probe_proxy": "rlkit.proxy.health",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
