"""Clean up after a trainer that was killed outright (`kill -9`, OOM killer), when no `finally` runs.
Both trainers start it: the local one, and `rlkit train` with TRAINER=verl (its launcher is the "trainer":
the lock names the run's Ray head, which the reaper stops, and the vLLM/proxy processes it owned).

The trainer starts this as a separate session (`python -m rlkit.train.reaper LOCK`) that
outlives it. It waits for the trainer's pid to go; if the run's lock still names that pid
(the trainer did not finish cleanly), it stops the processes the lock lists (`children`:
Ray's daemons, agents and actors, vLLM and the proxy, with their start times so a reused pid
is never hit) and what they started, removes the run's labelled sandboxes and the folders the
lock lists (`leftovers`: Ray's session folder, vLLM's scratch folder), then removes the lock.
What it did goes to logs/<exp>_reaper.log.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlkit.config.owner import stop_processes as terminate_then_kill
from rlkit.launch.lock import pid_alive, read_lock

POLL_S = 1.0
TERM_GRACE_S = 5.0
RAY_GRACE_S = 1.0
CREATE_SETTLE_S = 2.0


def start_reaper(lock_path: Path) -> subprocess.Popen:
    """The reaper for this process's run (own session: a Ctrl-C to the trainer's terminal does not reach it)."""
    log = lock_path.with_name(lock_path.name.removesuffix(".lock") + "_reaper.log")
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, "-m", "rlkit.train.reaper", str(lock_path), str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)


def stop_processes(children: list[list[float]]) -> list[int]:
    """SIGTERM, then SIGKILL after a grace period, the (pid, start time) pairs still alive and what they
    started (vLLM's engine core, Ray's workers)."""
    import psutil

    alive: dict[int, psutil.Process] = {}
    for pid, started in children:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - started) < 1.0:
                alive[proc.pid] = proc
                alive.update((p.pid, p) for p in proc.children(recursive=True))
        except psutil.Error:
            continue
    # Ray's own processes die with the trainer's Ray (GCS and raylet share its fate), and its agents then
    # sit out SIGTERM: they get a short grace. vLLM and the proxy get the full one, to end cleanly.
    from rlkit.ops.procs import cmdline

    procs = list(alive.values())
    ray_side = [p for p in procs if is_ray_process(cmdline(p))]
    terminate_then_kill(ray_side, RAY_GRACE_S)
    terminate_then_kill([p for p in procs if p not in ray_side], TERM_GRACE_S)  # gone before the lock says so
    return sorted(alive)


def stop_run_ray(lock: dict) -> list[int]:
    """TRAINER=verl: the run's own Ray (its head's GCS address is in the lock), in Ray's stop order. Its
    actors exit with their raylet, and the vLLM servers they started with them (`launch.vllm.die_with_owner`)."""
    ray = lock.get("ray")
    gcs = ray.get("gcs") if isinstance(ray, dict) else None
    if not isinstance(gcs, str) or ":" not in gcs:
        return []
    from rlkit.launch.ray_node import ray_processes, ray_stop_order

    host, _, port = gcs.rpartition(":")
    procs = ray_processes(host, int(port)) if port.isdigit() else []
    for stage in ray_stop_order(procs):
        terminate_then_kill(stage, RAY_GRACE_S)
    return [p.pid for p in procs]


def stop_owned_servers(project: str, experiments: tuple[str, ...]) -> list[int]:
    """vLLM and proxy processes of the run whose owner (the dead trainer) is gone and that are still up."""
    from rlkit.ops import procs

    left = [p for exp in experiments for p in procs.scan([], project, exp) if p.kind in ("vllm", "proxy") and p.orphan]
    stopped, _ = procs.stop(left)
    return [p.pid for p in stopped]


def is_ray_process(cmd: str) -> bool:
    """Ray's daemons, agents, workers and actors, by the markers cleanup knows them by."""
    from rlkit.ops.procs import kind_of

    return kind_of(cmd) == "ray"


def remove_leftovers(paths: list[str]) -> list[str]:
    """Remove the folders the lock lists, when they have the shape of a run's leftovers."""
    from rlkit.ops.tmpfiles import leftover_kind, remove
    from rlkit.train.ray_local import remove_session

    removed = []
    for text in paths:
        path = Path(text)
        if not path.exists() or leftover_kind(path) is None:
            continue
        if path.name.startswith("session_"):
            remove_session(path)
        elif remove(path) is not None:
            continue
        removed.append(text)
    return removed


def reap(lock_path: Path, trainer_pid: int) -> str:
    lock = read_lock(lock_path)
    if lock is None or int(lock.get("pid", -1)) != trainer_pid:
        return "trainer finished cleanly"
    from rlkit.ops.cleanup import Policy, cleanup

    # Ray's workers first: a live rollout worker would go on starting sandboxes behind the cleanup
    stopped = stop_processes(lock.get("children") or []) + stop_run_ray(lock)
    time.sleep(CREATE_SETTLE_S)  # a container create already sent to the daemon lands now
    removed = 0
    project, exp = lock.get("project"), lock.get("exp")
    if project and exp:
        stopped += stop_owned_servers(project, (exp, f"{exp}_val"))
    # training and validation sandboxes of this run only; never a wider cleanup
    for name in ((exp, f"{exp}_val") if project and exp else ()):
        # this run is named and known dead: force, so a sandbox labelled by a still-running actor goes too
        removed += len(cleanup(project, name, k8s=False, policy=Policy(lock_path.parent.parent, force=True)).removed)
    folders = remove_leftovers([p for p in lock.get("leftovers") or [] if isinstance(p, str)])
    if read_lock(lock_path) == lock:
        lock_path.unlink(missing_ok=True)
    return (f"trainer pid {trainer_pid} died at step {lock.get('step')} ({lock.get('phase')}): removed "
            f"{removed} sandbox(es), stopped {len(stopped)} process(es) {stopped}, removed {len(folders)} "
            f"folder(s) {folders}, removed the lock")


def main(argv: list[str]) -> int:
    lock_path, trainer_pid = Path(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while pid_alive(trainer_pid) and _not_zombie(trainer_pid):
        time.sleep(POLL_S)
    message = reap(lock_path, trainer_pid)
    print(f"{dt.datetime.now(dt.UTC).isoformat(timespec='seconds')} {message}", flush=True)
    return 0


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
