"""Run a LaunchPlan on this node: the very plan object DRY_RUN prints.

Rank 0: write the plan's files, start the Ray head, wait until NNODES nodes and their
GPUs registered, then run verl's trainer with the plan's overrides; its output is tee'd
to logs/<exp>.log as plain lines, Ray's own chatter to logs/<exp>_ray.log (`rlkit.launch.console`)
(the run lock, logs/<exp>.lock, held meanwhile), vLLM's throughput lines (forwarded by Ray from the
replicas on every node) are gathered into logs/<exp>_vllm.log, and progress is printed while verl boots its vLLM replicas. The
proxy runs inside verl's agent-loop workers (see rlkit.train.verl_agent_loop), bound to
the plan's proxy address. Every other rank: write the files, join Ray as a worker and
block until the head goes away, then exit cleanly.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rlkit.config.secrets import mask_secrets
from rlkit.errors import LaunchError, UserError
from rlkit.launch.console import plain_line, strip_escapes
from rlkit.launch.lock import RunLock
from rlkit.launch.plan import RAY_HEAD_PORT_FLAGS, LaunchPlan
from rlkit.launch.ray_node import (
    Waits,
    command_env,
    head_port,
    join_as_worker,
    start_head,
    stop_ray,
    wait_for_nodes,
)

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig

# vLLM's periodic engine stats; verl's replicas log them from their Ray actors.
VLLM_THROUGHPUT = re.compile(r"Avg prompt throughput|Avg generation throughput|Engine \d+: ")
# verl prints its replica addresses once every replica serves.
REPLICAS_READY = re.compile(r"LLMServerManager: \[|server_addresses|AgentLoopManager")


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


def run_trainer(plan: LaunchPlan, log: Path, vllm_log: Path, waits: Waits, *,
                say: Callable[[str], None] = print) -> int:
    """The trainer command, tee'd to `log`; vLLM's throughput lines also to `vllm_log`;
    progress while the replicas boot; its exit code.

    Ray forwards every actor's output, on every node, to the driver (log_to_driver, on in
    verl's ray.init), so the trainer's own stream carries the replicas' stats lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if plan.metrics is not None:
        plan.metrics[0].unlink(missing_ok=True)  # the last launch's lines are in logs/<exp>.jsonl already
        plan.metrics[0].parent.mkdir(parents=True, exist_ok=True)
    say(f"$ {plan.trainer.render()}")
    # The trainer dies with this launcher (a kill -9 included): Ray then ends its job's actors. The
    # child only calls prctl, resolved here before the fork, so the lock's heartbeat thread is no risk.
    proc = subprocess.Popen(plan.trainer.argv, env=command_env(plan.trainer), stdout=subprocess.PIPE,
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
        ray_log = log.with_name(f"{log.stem}_ray.log")
        with log.open("a") as sink, vllm_log.open("a") as vllm_sink, ray_log.open("a") as ray_sink:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = mask_secrets(line, plan.secrets)  # what verl or wandb print never shows a secret
                text, ray_own = plain_line(line)  # no escapes, no `(TaskRunnerV1 pid=..)`: `^step:` greps
                out = ray_sink if ray_own else sink
                out.write(text)
                out.flush()
                if VLLM_THROUGHPUT.search(text):  # with Ray's prefix: which replica, on which node
                    vllm_sink.write(strip_escapes(line))
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


def execute(plan: LaunchPlan, *, log: Path, vllm_log: Path, gpus_per_node: int, waits: Waits,
            say: Callable[[str], None] = print, lock: RunLock | None = None,
            teardown: Callable[[], None] | None = None, started: Callable[[], None] | None = None) -> int:
    """Run this node's part of the plan; the trainer's exit code on rank 0.

    On rank 0 `lock` (logs/<exp>.lock) marks the run in flight from before the Ray head starts
    until Ray is stopped: a second launch of the experiment refuses, status and cleanup find it,
    and what the run starts carries this launcher as its owner. `teardown` runs after Ray is
    stopped (the caller's: removing the run's sandboxes), also on Ctrl-C and SIGTERM. `started` runs once the
    lock is held, before Ray starts (the caller's: the attempt marker in the logs)."""
    write_files(plan)
    if not plan.node_is_head:
        return join_as_worker(plan, waits, say)
    with sigterm_interrupts(), lock if lock is not None else contextlib.nullcontext():
        if lock is not None:
            lock.update(phase="ray")
        if started is not None:
            started()
        start_head(plan, say)
        try:
            wait_for_nodes(f"{plan.head_address}:{head_port(plan)}", plan.nnodes, gpus_per_node, waits, say,
                           env=command_env(plan.trainer))  # the driver's Ray settings (token auth)
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


def ray_ports(plan: LaunchPlan) -> dict[str, object]:
    """What the lock records of the run's Ray head: its GCS address and the ports it was given."""
    given = {a.split("=", 1)[0].removeprefix("--"): int(a.split("=", 1)[1]) for a in plan.ray_head.argv
             if a.split("=", 1)[0] in RAY_HEAD_PORT_FLAGS}
    return {"gcs": f"{plan.head_address}:{head_port(plan)}", "ports": given}


def run(resolved: ResolvedConfig, teardown: Callable[[], None] | None = None,
        started: Callable[[], None] | None = None, total_steps: int | None = None) -> int:
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
    lock.data["ray"] = ray_ports(plan)
    if total_steps is not None:
        lock.data["total_steps"] = total_steps
    return execute(plan, log=paths.console_log, vllm_log=paths.vllm_log, gpus_per_node=c.GPUS_PER_NODE,
                   waits=Waits(nodes_s=c.NODE_WAIT_S, replicas_s=c.REPLICA_WAIT_S), lock=lock, teardown=teardown,
                   started=started)
