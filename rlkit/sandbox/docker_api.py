"""One docker Engine API client per process (per timeout kind), shared by the docker
backend, image builds and cleanup. Calls block: async code runs them through
`rlkit.sandbox.pool.run_blocking`."""

from __future__ import annotations

import threading
from typing import Any

from rlkit.sandbox.pool import MAX_THREADS

_lock = threading.Lock()
_clients: dict[str, Any] = {}


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


def remove_labelled(labels: dict[str, str]) -> int:
    """Remove every container, running or not, that carries all of `labels` (a stopped command's own
    sandboxes); answers how many went."""
    import docker.errors

    api = api_client()
    gone = 0
    for container in api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]}):
        try:
            api.remove_container(container["Id"], force=True, v=True)
            gone += 1
        except docker.errors.NotFound:
            continue
    return gone
