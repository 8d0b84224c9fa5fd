"""Context checks for `/rl:check` (`rlkit check --context CFG`, and `rlkit run` before it starts):
is this run already in flight, and are the GPUs it wants free of other people's processes?

    run_in_flight   the run's lock (logs/<exp>.lock, written by the trainers), rlkit processes of
                    this user (psutil), a live Ray head on a cluster head's RAY_PORT
    gpu_ownership   NVML (nvidia-ml-py): who holds each GPU the run wants. Another user's process is
                    FATAL (user, pid, memory); your own is a warning that suggests cleanup. Without
                    NVML (no GPU, no driver, no nvidia-ml-py) the check says ⚠ skipped, never crashes.
No torch, ray or verl is imported: these read locks, the process table and NVML only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from rlkit.config import owner as O
from rlkit.config.files import FileReadError
from rlkit.config.paths import RunPaths
from rlkit.validate.findings import (
    CHECK_TIMEOUT_S,
    Check,
    Context,
    Finding,
    Phase,
    fatal,
    ok,
    run_bounded,
    skip,
    warn,
)
from rlkit.validate.system import output_root

CLEANUP = "rlkit cleanup CFG (stops only orphans of dead runs)"
CHECKS: tuple[Check, ...] = (
    Check("run_in_flight", Phase.WORLD, "no run of this EXP_NAME in flight; no stray rlkit processes or Ray head",
          "rlkit.validate.context:run_in_flight"),
    Check("gpu_ownership", Phase.WORLD, "the run's GPUs hold no one else's processes (NVML)",
          "rlkit.validate.context:gpu_ownership"),
)


def _describe_lock(lock: dict) -> str:
    return (f"pid {lock.get('pid')} on {lock.get('host')}, user {lock.get('user')}, step {lock.get('step')} "
            f"({lock.get('phase')}), started {lock.get('started')}")


def run_in_flight(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    out: list[Finding] = []
    paths = RunPaths(output_root(ctx), c.PROJECT_NAME or "default", c.EXP_NAME or "default")
    try:
        lock = O.load_lock(paths.lock)
    except FileReadError as exc:  # a FIFO, a link to a device, deep JSON: not a lock, and never read as one
        out.append(warn("run_in_flight", f"the run lock {exc.message}; whether {c.EXP_NAME} is in flight is not "
                        "known from it", exc.fix or "delete it if no run of this experiment is in flight",
                        key="EXP_NAME", where=exc.file))
        lock = None
    if lock is not None and not O.lock_is_stale(lock):
        out.append(fatal("run_in_flight", f"{c.EXP_NAME} is already running: {_describe_lock(lock)}",
                         f"follow it with `rlkit status {paths.root}`; stop it (kill {lock.get('pid')}) or pick "
                         "another EXP_NAME", key="EXP_NAME", where=ctx.resolved.where("EXP_NAME")))
    elif lock is not None:
        out.append(warn("run_in_flight", f"stale lock of a dead run ({_describe_lock(lock)}): {paths.lock}",
                        f"the next run takes it over; {CLEANUP} removes what the dead run left"))
    for path, other in O.live_locks(paths.logs):
        if path != paths.lock:
            out.append(warn("run_in_flight", f"another run is in flight here: {other.get('exp')} "
                            f"({_describe_lock(other)})", "make sure the two runs do not share GPUs or ports"))
    out += _stray_processes(c)
    from rlkit.launch.plan import private_ray

    if not private_ray(c.RAY_HEAD_ADDRESS, c.NNODES):  # a one-machine run's Ray takes free ports
        out += _ray_head(c.RAY_PORT)
    return out or [ok("run_in_flight", f"no run of {c.EXP_NAME} in flight; no stray rlkit process or Ray head")]


def _stray_processes(c: object) -> list[Finding]:
    """This user's rlkit servers whose owner is gone: leftovers of a dead run."""
    import psutil

    out, me = [], O.me()
    for proc in psutil.process_iter(["pid", "username", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if proc.info["username"] != me or proc.info["pid"] == os.getpid() or not cmd:
            continue
        kind = next((k for k, marks in O.SERVER_MARKERS.items() if any(m in cmd for m in marks)), None)
        if kind is None:
            continue
        try:
            owner = O.Owner.from_env(proc.environ(), me)
        except psutil.Error:
            continue
        if owner is not None and owner.alive() is False:
            out.append(warn("run_in_flight", f"orphaned {kind} process pid {proc.info['pid']} (its owner pid "
                            f"{owner.pid} is gone): {cmd[:80]}", CLEANUP))
    return out


def _ray_head(port: int) -> list[Finding]:
    import psutil

    for conn in psutil.net_connections(kind="inet"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        who, cmd = "?", ""
        try:
            proc = psutil.Process(conn.pid) if conn.pid else None
            who, cmd = (proc.username(), " ".join(proc.cmdline())) if proc else ("?", "")
        except psutil.Error:
            pass
        what = "a Ray head (gcs_server)" if "gcs_server" in cmd else f"pid {conn.pid} ({cmd[:60] or 'not visible'})"
        if who not in (O.me(), "?"):
            return [fatal("run_in_flight", f"RAY_PORT {port} is held by {what} of user {who}",
                          "that user's run owns it: pick another RAY_PORT or wait", key="RAY_PORT")]
        return [warn("run_in_flight", f"RAY_PORT {port} is held by {what}, pid {conn.pid}, yours",
                     f"a run of yours is in flight, or Ray was left behind: {CLEANUP}, or `ray stop` if you "
                     "started it by hand", key="RAY_PORT")]
    return []


# ---- GPUs --------------------------------------------------------------------------------------
def wanted_gpus(ctx: Context, count: int) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [int(x) for x in visible.split(",") if x.strip().isdigit() and int(x) < count]
    return list(range(min(count, int(ctx.resolved.config.GPUS_PER_NODE))))


def process_owner(pid: int) -> tuple[str | None, str]:
    """(user, command line) of a pid; user None when the pid is not visible here (another container)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.username(), " ".join(proc.cmdline())[:80]
    except psutil.Error:
        return None, ""


def _nvml() -> object | str:
    """The initialised pynvml module, or why there is none."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed (pip install 'rlkit[gpu]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 — NVMLError_LibraryNotFound, DriverNotLoaded, ...: no GPU here
        return f"NVML unavailable ({type(exc).__name__}: {exc})"
    return pynvml


def gpu_ownership(ctx: Context, owner_of: Callable[[int], tuple[str | None, str]] | None = None) -> list[Finding]:
    nvml = _nvml()
    if isinstance(nvml, str):
        return [warn("gpu_ownership", f"skipped: {nvml}; which processes hold the GPUs was not checked",
                     "on a GPU node: install the NVIDIA driver and `pip install 'rlkit[gpu]'`; on a CPU-only "
                     "machine nothing to do")]
    owner_of = owner_of or process_owner
    me, out = O.me(), []
    try:
        wanted = wanted_gpus(ctx, nvml.nvmlDeviceGetCount())
        for index in wanted:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            procs = {p.pid: p for p in (*nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                                         *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))}
            for pid, proc in sorted(procs.items()):
                mib = (proc.usedGpuMemory or 0) // (1 << 20)
                user, cmd = owner_of(pid)
                held = f"GPU {index}: pid {pid} holds {mib} MiB"
                if user is None:
                    out.append(warn("gpu_ownership", f"{held}; its owner is not visible here (another container?)",
                                    "find it with nvidia-smi on the host; the run would share that GPU"))
                elif user != me:
                    out.append(fatal("gpu_ownership", f"{held}, user {user} ({cmd})",
                                     f"that GPU is {user}'s: pick free GPUs (CUDA_VISIBLE_DEVICES) or wait"))
                else:
                    out.append(warn("gpu_ownership", f"{held}, yours ({cmd}) — a stale process of yours?",
                                    f"{CLEANUP}; or `kill {pid}` if it is not an rlkit process"))
    except Exception as exc:  # noqa: BLE001 — a driver error mid-query is a skip, not a crash
        return [warn("gpu_ownership", f"skipped: NVML query failed ({type(exc).__name__}: {exc})",
                     "run nvidia-smi to see the GPUs' state")]
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110
            pass
    if not wanted:
        return [skip("gpu_ownership", "no GPU visible to this run")]
    return out or [ok("gpu_ownership", f"GPU(s) {','.join(map(str, wanted))}: no process holds them")]


def run_context_checks(ctx: Context) -> list[Finding]:
    return [f for check in CHECKS for f in run_bounded(check, ctx, CHECK_TIMEOUT_S)]
