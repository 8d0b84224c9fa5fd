"""The sandbox thread pool: every blocking docker / kubernetes client call runs here.

The default asyncio pool has min(32, cpus+4) threads, which would serialise 32
concurrent trials behind a handful of long `exec`s on a 2-core machine.
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


def executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="rlkit-sandbox")
        return _executor


async def run_blocking[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor(), functools.partial(fn, *args, **kwargs))
