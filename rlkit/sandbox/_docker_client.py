"""One docker API client and one thread pool per process.

Every docker SDK call blocks, so async code runs them on a dedicated executor: the
default asyncio pool has min(32, cpus+4) threads, which would serialise 32 concurrent
trials behind a handful of long `exec`s on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_THREADS = 256
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_clients: dict[str, Any] = {}


def executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="rlkit-docker")
        return _executor


async def run_blocking[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor(), functools.partial(fn, *args, **kwargs))


def api_client(long_running: bool = False) -> Any:
    """Low-level `docker.APIClient` from the environment (DOCKER_HOST etc.).

    `long_running=True` gives a client without a read timeout, for `exec_start` of
    commands that run for minutes (their timeout is enforced by the caller)."""
    key = "exec" if long_running else "api"
    with _lock:
        client = _clients.get(key)
        if client is None:
            import docker

            from rlkit.sandbox.dockerd import ensure_dockerd

            ensure_dockerd()
            kwargs = docker.utils.kwargs_from_env()
            client = docker.APIClient(version="auto", max_pool_size=MAX_THREADS,
                                      timeout=None if long_running else 300, **kwargs)
            _clients[key] = client
        return client


def reset_clients() -> None:
    """Drop cached clients (after a fork, or when DOCKER_HOST changes)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
