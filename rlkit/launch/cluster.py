"""Run a LaunchPlan on this node: the very plan object DRY_RUN prints.

Rank 0: write the plan's files, start the Ray head, wait until NNODES nodes and their
GPUs registered, then run verl's trainer with the plan's overrides; its output is tee'd
to logs/<exp>.log (the run lock, logs/<exp>.lock, held meanwhile), vLLM's throughput lines (forwarded by Ray from the replicas on every node)
are gathered into logs/<exp>_vllm.log, and progress is printed while verl boots its vLLM replicas. The
proxy runs inside verl's agent-loop workers (see rlkit.train.verl_agent_loop), bound to
the plan's proxy address. Every other rank: write the files, join Ray as a worker and
block until the head goes away, then exit cleanly.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.config.secrets import mask_secrets
from rlkit.errors import LaunchError, UserError
from rlkit.launch.lock import RunLock
from rlkit.launch.plan import Command, LaunchPlan

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig

# vLLM's periodic engine stats; verl's replicas log them from their Ray actors.
VLLM_THROUGHPUT = re.compile(r"Avg prompt throughput|Avg generation throughput|Engine \d+: ")
# verl prints its replica addresses once every replica serves.
REPLICAS_READY = re.compile(r"LLMServerManager: \[|server_addresses|AgentLoopManager")


@dataclass
class Waits:
    nodes_s: float = 600.0
    replicas_s: float = 3600.0
    poll_s: float = 2.0
    progress_s: float = 30.0


def write_files(plan: LaunchPlan) -> None:
    """The plan's files, each written whole to a new file and moved into place (whatever was at the path,
    a FIFO included, is replaced, never opened); a path that cannot be written is a UserError naming it."""
    import tempfile

    for path, text in plan.files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
                tmp.write(text)
            os.replace(tmp.name, path)
        except OSError as exc:
            raise UserError(f"cannot write {path} ({exc.strerror or type(exc).__name__})", key="OUTPUT_DIR",
                            fix="set OUTPUT_DIR to a directory this user can write") from None


def _env(command: Command, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The plan prints a masked key; the real one is already in this process's environment.
    env.update({k: v for k, v in command.env.items() if v != "****"})
    env.update(extra or {})
    return env


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


def start_head(plan: LaunchPlan, say: Callable[[str], None] = print) -> None:
    """`ray start --head`; on a loaded machine Ray's fixed 30 s wait for its raylet can run out, so that
    failure stops what the attempt left (this run's GCS address only) and tries again, at most 3 times."""
    ensure_ray_token(plan.ray_head)
    say(f"$ {plan.ray_head.render()}")
    for attempt in range(1, RAY_HEAD_ATTEMPTS + 1):
        proc = subprocess.run(plan.ray_head.argv, env=_env(plan.ray_head), capture_output=True, text=True,
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


def run_trainer(plan: LaunchPlan, log: Path, vllm_log: Path, waits: Waits, *,
                say: Callable[[str], None] = print) -> int:
    """The trainer command, tee'd to `log`; vLLM's throughput lines also to `vllm_log`;
    progress while the replicas boot; its exit code.

    Ray forwards every actor's output, on every node, to the driver (log_to_driver, on in
    verl's ray.init), so the trainer's own stream carries the replicas' stats lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if plan.metrics is not None:
        plan.metrics[0].unlink(missing_ok=True)  # the last launch's lines are in logs/<exp>.jsonl already
    say(f"$ {plan.trainer.render()}")
    # The trainer dies with this launcher (a kill -9 included): Ray then ends its job's actors. The
    # child only calls prctl, resolved here before the fork, so the lock's heartbeat thread is no risk.
    proc = subprocess.Popen(plan.trainer.argv, env=_env(plan.trainer), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1,
                            preexec_fn=_die_with_parent())  # noqa: PLW1509
    ready = threading.Event()
    started = time.monotonic()

    def progress() -> None:
        while not ready.wait(waits.progress_s) and proc.poll() is None:
            waited = time.monotonic() - started
            if waited >= waits.replicas_s:
                say(f"vLLM replicas not ready after {waits.replicas_s:.0f}s (REPLICA_WAIT_S); stopping the trainer")
                proc.terminate()
                return
            say(f"waiting for verl's vLLM replicas ({waited:.0f}s of {waits.replicas_s:.0f}s; CUDA-graph capture "
                "takes 10-20 minutes on big models)")

    threading.Thread(target=progress, name="rlkit-replica-wait", daemon=True).start()
    if plan.metrics is not None:
        threading.Thread(target=follow_jsonl, args=(*plan.metrics, proc), name="rlkit-jsonl", daemon=True).start()
    try:
        with log.open("a") as sink, vllm_log.open("a") as vllm_sink:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = mask_secrets(line, plan.secrets)  # what verl or wandb print never shows a secret
                sink.write(line)
                sink.flush()
                if VLLM_THROUGHPUT.search(line):
                    vllm_sink.write(line)
                    vllm_sink.flush()
                print(line, end="", flush=True)
                if not ready.is_set() and REPLICAS_READY.search(line):
                    ready.set()
                    say(f"vLLM replicas ready after {time.monotonic() - started:.0f}s")
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()
    finally:
        ready.set()


def follow_jsonl(source: Path, sink: Path, proc: subprocess.Popen, poll_s: float = 1.0) -> None:
    """Append every line verl's file logger writes to `source` onto `sink` (logs/<exp>.jsonl), until the
    trainer exits. verl opens `source` anew at each launch; `sink` keeps every launch's records (a
    resumed step's later record wins where readers see the step twice)."""
    offset = 0
    while True:
        done = proc.poll() is not None
        try:
            with source.open("rb") as f:
                if f.seek(0, 2) < offset:
                    offset = 0  # verl truncated it: a new launch
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        whole = chunk[:chunk.rfind(b"\n") + 1]
        if whole:
            with sink.open("ab") as out:
                out.write(whole)
            offset += len(whole)
        if done:
            return
        time.sleep(poll_s)


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec: SIGTERM when the launcher dies (Linux PR_SET_PDEATHSIG)."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL("libc.so.6").prctl
    return lambda: prctl(1, signal.SIGTERM)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM unwinds the launcher as Ctrl-C does (the trainer is stopped, then Ray, then the
    lock is released), where a handler can be set (the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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

    for stage in ray_stop_order(ray_processes(plan.head_address, _port(plan), node_address)):
        stop_processes(stage, grace_s)


def join_as_worker(plan: LaunchPlan, say: Callable[[str], None] = print) -> int:
    """`ray start --block` until the head goes away; that end is clean (0)."""
    say(f"$ {plan.ray_worker.render()}")
    rc = subprocess.run(plan.ray_worker.argv, env=_env(plan.ray_worker), check=False).returncode
    if head_reachable(plan.head_address, _port(plan)):
        say(f"Ray worker exited ({rc}) while the head at {plan.head_address} is still up")
        return rc or 1
    say(f"the Ray head at {plan.head_address} went away; this worker is done")
    stop_ray(plan, node_address=plan.node_address)
    return 0


def head_reachable(host: str, port: int, timeout_s: float = 2.0) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def execute(plan: LaunchPlan, *, log: Path, vllm_log: Path, gpus_per_node: int, waits: Waits,
            say: Callable[[str], None] = print, lock: RunLock | None = None,
            teardown: Callable[[], None] | None = None) -> int:
    """Run this node's part of the plan; the trainer's exit code on rank 0.

    On rank 0 `lock` (logs/<exp>.lock) marks the run in flight from before the Ray head starts
    until Ray is stopped: a second launch of the experiment refuses, status and cleanup find it,
    and what the run starts carries this launcher as its owner. `teardown` runs after Ray is
    stopped (the caller's: removing the run's sandboxes), also on Ctrl-C and SIGTERM."""
    write_files(plan)
    if not plan.node_is_head:
        return join_as_worker(plan, say)
    with sigterm_interrupts(), lock if lock is not None else contextlib.nullcontext():
        if lock is not None:
            lock.update(phase="ray")
        start_head(plan, say)
        try:
            wait_for_nodes(f"{plan.head_address}:{_port(plan)}", plan.nnodes, gpus_per_node, waits, say,
                           env=_env(plan.trainer))  # the driver's Ray settings (token auth)
            if lock is not None:
                lock.update(phase="training")
            return run_trainer(plan, log, vllm_log, waits, say=say)
        finally:
            held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)} \
                if threading.current_thread() is threading.main_thread() else {}
            try:  # a second Ctrl-C / SIGTERM must not cut the teardown short
                stop_ray(plan, node_address=plan.node_address)
                if teardown is not None:
                    teardown()
            finally:
                for sig, handler in held.items():
                    signal.signal(sig, handler)


def _port(plan: LaunchPlan) -> int:
    return next((int(a.split("=", 1)[1]) for a in plan.ray_head.argv if a.startswith("--port=")), 6379)


def run(resolved: ResolvedConfig, teardown: Callable[[], None] | None = None) -> int:
    """`rlkit train` with TRAINER=verl: print this node's plan, then execute that same object."""
    from rlkit.config.paths import RunPaths
    from rlkit.config.schema import VerlDevice
    from rlkit.launch.nodes import has_nvidia_gpu
    from rlkit.launch.plan import build_plan

    c = resolved.config
    if c.VERL_DEVICE is VerlDevice.CUDA and not has_nvidia_gpu():
        raise LaunchError("TRAINER=verl with VERL_DEVICE=cuda runs verl's trainer and vLLM on NVIDIA GPUs, and this "
                          "machine has none; nothing was started", fix="run it on the cluster's nodes "
                          "(docs/cluster.md), set VERL_DEVICE=cpu to run verl's trainer on this machine's CPU, or "
                          "TRAINER=local for the embedded CPU trainer")
    plan = build_plan(resolved)
    print(plan.render(), flush=True)
    paths = RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME, c.EXP_NAME)
    lock = RunLock(paths.lock, project=c.PROJECT_NAME, exp=c.EXP_NAME, config=str(resolved.config_path),
                   overrides=resolved.public_overrides())
    return execute(plan, log=paths.console_log, vllm_log=paths.vllm_log, gpus_per_node=c.GPUS_PER_NODE,
                   waits=Waits(nodes_s=c.NODE_WAIT_S, replicas_s=c.REPLICA_WAIT_S), lock=lock, teardown=teardown)
