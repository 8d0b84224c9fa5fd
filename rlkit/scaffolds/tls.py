"""One TLS context for the short-lived httpx clients that call the proxy around each trial.

httpx builds a new context for every client, loading certifi's CA bundle: 19 ms of CPU each,
and a model trial opens three (its limits, its sampling and its record). A shared context
verifies exactly as httpx's default does.
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    import httpx

    return httpx.create_ssl_context(trust_env=False)  # as the clients: trust_env=False
