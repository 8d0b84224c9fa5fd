"""This node's part of a run's Ray cluster: the head's start, a worker's join, the nodes that
registered, and the stop of this run's Ray processes (only those naming its GCS address).

A worker node is often started beside the head, or before it: it waits for the head's GCS, and
joins again when its `ray start` fails before the node came up (the head still booting on a loaded
machine, or restarting after Ray's 30 s startup timeout), until NODE_WAIT_S runs out. A node that
was up and lost its head is done: the run is over.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlkit.errors import LaunchError
from rlkit.launch.plan import Command, LaunchPlan


@dataclass
class Waits:
    nodes_s: float = 600.0
    replicas_s: float = 3600.0
    poll_s: float = 2.0
    progress_s: float = 30.0


def command_env(command: Command) -> dict[str, str]:
    """The environment a plan's command runs in."""
    # The plan prints a masked key; the real one is already in this process's environment.
    return {**os.environ, **{k: v for k, v in command.env.items() if v != "****"}}


def ensure_ray_token(command: Command) -> None:
    """A multi-node run's Ray token on the shared filesystem (Ray itself only creates ~/.ray/auth_token)."""
    path = command.env.get("RAY_AUTH_TOKEN_PATH")
    if path and not Path(path).exists():
        import secrets

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(secrets.token_hex(32))
        Path(path).chmod(0o600)


RAY_HEAD_ATTEMPTS = 3
RAY_STARTUP_TIMEOUT = "timed out during startup"  # Ray waits a fixed 30 s for its raylet to register
RAY_NODE_UP = "Ray runtime started."  # what `ray start` prints once this node registered with the head


def start_head(plan: LaunchPlan, say: Callable[[str], None] = print) -> None:
    """`ray start --head`; on a loaded machine Ray's fixed 30 s wait for its raylet can run out, so that
    failure stops what the attempt left (this run's GCS address only) and tries again, at most 3 times."""
    ensure_ray_token(plan.ray_head)
    say(f"$ {plan.ray_head.render()}")
    for attempt in range(1, RAY_HEAD_ATTEMPTS + 1):
        proc = subprocess.run(plan.ray_head.argv, env=command_env(plan.ray_head), capture_output=True, text=True,
                              check=False)
        if proc.returncode == 0 or RAY_STARTUP_TIMEOUT not in (proc.stderr + proc.stdout) \
                or attempt == RAY_HEAD_ATTEMPTS:
            break
        say(f"the Ray head did not start in Ray's 30 s (attempt {attempt} of {RAY_HEAD_ATTEMPTS}); retrying")
        stop_ray(plan)
    if proc.returncode != 0:
        raise LaunchError(f"`ray start --head` failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}",
                          fix="`rlkit cleanup CFG` stops a Ray a dead run left; `ray stop` one you started by hand; or free RAY_PORT")


def ray_nodes(address: str, env: dict[str, str] | None = None) -> list[dict]:
    """Alive nodes of the cluster at `address`, as `{"address", "gpus"}` (asked in a child
    process, so this launcher never becomes a Ray driver of the run)."""
    code = ("import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([{'address': n['NodeManagerAddress'], 'gpus': n['Resources'].get('GPU', 0)} "
            "for n in ray.nodes() if n['Alive']])); ray.shutdown()")
    python = os.environ.get("RLKIT_PYTHON") or sys.executable
    proc = subprocess.run([python, "-c", code, address], capture_output=True, text=True, timeout=120, check=False,
                          env=env)
    if proc.returncode != 0:
        return []
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wait_for_nodes(address: str, nnodes: int, gpus_per_node: int, waits: Waits,
                   say: Callable[[str], None] = print, env: dict[str, str] | None = None) -> list[dict]:
    """Block until `nnodes` alive nodes with `gpus_per_node` GPUs each; LaunchError names what is missing."""
    started = time.monotonic()
    last_report = 0.0
    nodes: list[dict] = []
    while True:
        nodes = ray_nodes(address, env)
        short = [n for n in nodes if n["gpus"] < gpus_per_node]
        if len(nodes) >= nnodes and not short:
            say(f"Ray: {len(nodes)}/{nnodes} node(s) joined: " + ", ".join(
                f"{n['address']} ({n['gpus']:g} GPUs)" for n in nodes))
            return nodes
        waited = time.monotonic() - started
        if waited >= waits.nodes_s:
            joined = ", ".join(f"{n['address']} ({n['gpus']:g} GPUs)" for n in nodes) or "none"
            missing = [f"{nnodes - len(nodes)} node(s) never joined"] if len(nodes) < nnodes else []
            missing += [f"{n['address']} registered {n['gpus']:g} of {gpus_per_node} GPUs" for n in short]
            raise LaunchError(f"after {waits.nodes_s:.0f}s only {len(nodes)}/{nnodes} Ray node(s) are ready; "
                              f"joined: {joined}; missing: {'; '.join(missing)}",
                              fix="run the same `rlkit train CFG` on every node (they join the head at "
                                  f"{address}); check that they reach it and see their GPUs, or raise NODE_WAIT_S")
        if waited - last_report >= waits.progress_s:
            last_report = waited
            say(f"waiting for Ray nodes: {len(nodes)}/{nnodes} joined ({waited:.0f}s of {waits.nodes_s:.0f}s)")
        time.sleep(waits.poll_s)


def join_as_worker(plan: LaunchPlan, waits: Waits, say: Callable[[str], None] = print) -> int:
    """`ray start --block` until the head goes away; that end is clean (0).

    Before the node came up (Ray prints RAY_NODE_UP), a failed `ray start` is tried again once the
    head answers, within `waits.nodes_s` of this call; after it, the head's end is the run's end."""
    host, port = plan.head_address, head_port(plan)
    deadline = time.monotonic() + waits.nodes_s
    say(f"$ {plan.ray_worker.render()}")
    for attempt in itertools.count(1):
        if not wait_for_head(host, port, deadline, waits, say):
            say(f"✗ the Ray head at {host}:{port} did not answer within NODE_WAIT_S ({waits.nodes_s:.0f}s); start "
                "`rlkit train CFG` on the head node (RAY_HEAD_ADDRESS), or raise NODE_WAIT_S")
            return 1
        rc, node_up = _ray_start_block(plan.ray_worker)
        if node_up:
            break
        if time.monotonic() >= deadline:
            say(f"✗ this node's `ray start` failed ({rc}) {attempt} time(s) within NODE_WAIT_S ({waits.nodes_s:.0f}s)")
            return rc or 1
        say(f"this node's `ray start` failed ({rc}) before the node came up (attempt {attempt}); joining the head "
            f"at {host}:{port} again once it answers")
        stop_ray(plan, node_address=plan.node_address)  # what the failed start left
        time.sleep(waits.poll_s)
    if head_reachable(host, port):
        say(f"Ray worker exited ({rc}) while the head at {host} is still up")
        return rc or 1
    say(f"the Ray head at {host} went away; this worker is done")
    stop_ray(plan, node_address=plan.node_address)
    return 0


def _ray_start_block(command: Command) -> tuple[int, bool]:
    """Run `ray start --block`, its output passed through; (exit code, whether the node came up)."""
    node_up = False
    with subprocess.Popen(command.argv, env=command_env(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                node_up = node_up or RAY_NODE_UP in line
                print(line, end="", flush=True)
        except BaseException:
            proc.terminate()  # Ctrl-C, SIGTERM: Ray's block loop stops its own processes
            raise
    return proc.returncode, node_up


def wait_for_head(host: str, port: int, deadline: float, waits: Waits, say: Callable[[str], None]) -> bool:
    """Whether the head's GCS port answers before `deadline` (time.monotonic)."""
    started = last_report = time.monotonic()
    while not head_reachable(host, port):
        now = time.monotonic()
        if now >= deadline:
            return False
        if now - last_report >= waits.progress_s:
            last_report = now
            say(f"waiting for the Ray head at {host}:{port} ({now - started:.0f}s)")
        time.sleep(min(waits.poll_s, max(0.0, deadline - now)))
    return True


def ray_processes(head: str, port: int, node_address: str | None = None) -> list:
    """This run's Ray processes on this host (their command lines name its GCS address, and
    `node_address` narrows them to one node's), so stopping them never touches another Ray
    on the same machine, as `ray stop` would."""
    import psutil

    gcs = f"{head}:{port}"
    mine = re.compile(rf"(--node-ip-address|--node_ip_address|--monitor-ip|--host)={re.escape(node_address or '')}(\s|$)")
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if gcs not in line and f"--gcs_server_port={port} " not in line + " ":
            continue
        if node_address is not None and not mine.search(line.split(" --python_worker_command")[0]):
            continue
        out.append(proc)
    return out


def _info_cmdline(proc) -> str:  # ray_processes read each command line once (psutil's `info`)
    return " ".join(proc.info.get("cmdline") or [])


def ray_stop_order(procs: list, cmd: Callable[[object], str] = _info_cmdline) -> list[list]:
    """Ray's own order (`ray stop`): the raylet first, the GCS last. Stopped all at once, the
    processes that still talk to the GCS (the autoscaler's monitor) outlived SIGTERM for 10+ s
    and were killed at the end of the grace; in this order each stage ends within ~2 s.
    `cmd` gives a process's command line; anything not Ray's goes with the middle stage."""

    raylets = [p for p in procs if "/raylet/raylet" in cmd(p) or "plasma_store" in cmd(p)]
    gcs = [p for p in procs if "/gcs/gcs_server" in cmd(p) and p not in raylets]
    rest = [p for p in procs if p not in raylets and p not in gcs]
    return [stage for stage in (raylets, rest, gcs) if stage]


def stop_ray(plan: LaunchPlan, node_address: str | None = None, grace_s: float = 10.0) -> None:
    from rlkit.config.owner import stop_processes

    for stage in ray_stop_order(ray_processes(plan.head_address, head_port(plan), node_address)):
        stop_processes(stage, grace_s)


def head_reachable(host: str, port: int, timeout_s: float = 2.0) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False



def head_port(plan: LaunchPlan) -> int:
    return next((int(a.split("=", 1)[1]) for a in plan.ray_head.argv if a.startswith("--port=")), 6379)
