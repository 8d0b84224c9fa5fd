"""The local trainer's one-machine Ray (`local_ray`): loopback only, and no leftovers.

Loopback: Ray binds its gRPC servers and agents to every interface unless the node's address is
a loopback name, and on Linux it swaps 127.0.0.1 for the host's own address before it gets that
far. `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` turns the swap off (Ray's own switch for one-machine
Rays), so node address 127.0.0.1 stays, and every Ray process (the GCS, the raylet, the agents,
the workers, which inherit the variable) listens on 127.0.0.1 only.

Leftovers: Ray keeps its session folder (/tmp/ray/session_<time>_<pid>: logs, sockets, ports)
and points /tmp/ray/session_latest at it after `ray.shutdown()`. The run removes both when it
ends, and lists the folder in its lock so the reaper does after a kill -9.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlkit.config.paths import RunPaths

log = logging.getLogger(__name__)
NODE_ADDRESS = "127.0.0.1"
RAY_OBJECT_STORE_BYTES = 100 * 2**20
RAY_CPUS = 2
RAY_START_ATTEMPTS = 3
RAY_EXIT_WAIT_S = 5.0
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def loopback_only() -> Iterator[str]:
    """Set up this process (and what it starts meanwhile) for a Ray on loopback; yields the node address.

    Both switches go back as they were on exit: a process that trains in-process (`rlkit.train`) and
    then starts a multi-node Ray (`ray start` inherits the environment) would otherwise be refused
    ("Multi-node Ray clusters are not supported")."""
    import ray._private.ray_constants as constants

    previous, was = os.environ.get(CLUSTER_SWITCH), constants.ENABLE_RAY_CLUSTER
    os.environ[CLUSTER_SWITCH] = "0"
    constants.ENABLE_RAY_CLUSTER = False  # read when ray.init resolves the node address
    try:
        yield NODE_ADDRESS
    finally:
        constants.ENABLE_RAY_CLUSTER = was
        if previous is None:
            os.environ.pop(CLUSTER_SWITCH, None)
        else:
            os.environ[CLUSTER_SWITCH] = previous


def session_dir() -> Path | None:
    """The session folder of the Ray this process started or joined (None when there is none)."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    try:
        return Path(node.get_session_dir_path()) if node is not None else None
    except AttributeError:
        return None


def remove_session(session: Path | None) -> None:
    """Remove a stopped Ray's session folder, and session_latest when it points at it."""
    if session is None or not session.name.startswith("session_"):
        return
    latest = session.parent / "session_latest"
    try:
        if latest.is_symlink() and Path(os.path.join(latest.parent, os.readlink(latest))) == session:
            latest.unlink()
    except OSError:
        pass
    shutil.rmtree(session, ignore_errors=True)


@contextmanager
def local_ray(paths: RunPaths) -> Iterator[list[list[float]]]:
    """A small Ray of this process (2 CPUs, no dashboard, a 100 MiB object store, loopback only); yields its
    processes as (pid, start time) for the lock, so the reaper can stop them after a kill -9. Its session
    folder goes when it stops."""
    import psutil
    import ray

    with loopback_only() as node_address:
        before = {p.pid for p in psutil.Process().children(recursive=True)}  # the reaper is not Ray's
        # address="local": always a Ray of our own, even when RAY_ADDRESS points at a cluster
        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            try:
                ray.init(address="local", num_cpus=RAY_CPUS, num_gpus=0, include_dashboard=False,
                         object_store_memory=RAY_OBJECT_STORE_BYTES, log_to_driver=False, configure_logging=False,
                         namespace=f"rlkit-{paths.project}-{paths.exp}", _node_ip_address=node_address)
                break
            except Exception:  # Ray waits a fixed 30 s for its raylet; on a loaded machine that can run out
                ray.shutdown()
                if attempt == RAY_START_ATTEMPTS:
                    raise
                log.warning("local Ray did not start (attempt %d of %d); retrying", attempt, RAY_START_ATTEMPTS)
        session = session_dir()
        me = psutil.Process()
        try:
            children = [[p.pid, p.create_time()] for p in me.children(recursive=True) if p.pid not in before]
            yield children
        finally:
            ray_side = [p for p in me.children(recursive=True) if p.pid not in before]  # the workers too
            ray.shutdown()
            stop_leftover_workers(ray_side)
            remove_session(session)


def stop_leftover_workers(procs: list, wait_s: float = RAY_EXIT_WAIT_S) -> list[int]:
    """After `ray.shutdown()`: the Ray processes (actors' workers among them) that outlive it by `wait_s`
    are stopped. A worker leaves on its own once its raylet is gone, but a busy or loaded one took
    seconds, and a run that has returned must leave none of its processes behind. Their pids."""
    import psutil

    from rlkit.config.owner import stop_processes

    _, alive = psutil.wait_procs(procs, timeout=wait_s)
    alive = [p for p in alive if _running(p)]
    if alive:
        log.info("stopping %d Ray process(es) that outlived ray.shutdown(): %s", len(alive), [p.pid for p in alive])
        stop_processes(alive, RAY_EXIT_WAIT_S)
    return [p.pid for p in alive]


def _running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
