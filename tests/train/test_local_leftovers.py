"""What a local run leaves, and how it stops: its Ray on loopback with no session folder left, the reaper
removing the folders the lock lists, a graceful stop (first signal) and a hard one (second signal or
the deadline), the messages that say what was saved, and attempt numbering."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlkit.config.paths import RunPaths

LOCAL_RAY = """
import json, os, sys
from pathlib import Path
import psutil
from rlkit.config.paths import RunPaths
from rlkit.train.ray_local import local_ray
from rlkit.train.ray_local import session_dir
from tests.train.test_local_e2e import listening

with local_ray(RunPaths(Path(sys.argv[1]), "p", "e")) as children:
    import ray

    @ray.remote(num_cpus=1)
    def where():
        return os.getpid()

    @ray.remote(num_cpus=1)
    class Actor:
        def pid(self):
            return os.getpid()

    worker = ray.get(where.remote())
    actor = Actor.remote()
    actor_pid = ray.get(actor.pid.remote())
    session = session_dir()
    procs = [psutil.Process(pid) for pid, _ in children] + [psutil.Process(worker), psutil.Process()]
    found = {"session": str(session), "existed": session.is_dir(), "sockets": listening(procs)}
    ray_side = [p for p in psutil.Process().children(recursive=True)]
from rlkit.train.ray_local import _running
alive = [p.pid for p in ray_side if _running(p)]
found["alive_after"] = alive
found["actor_alive_after"] = actor_pid in alive
print(json.dumps(found))
"""


def test_the_local_ray_listens_on_loopback_only_and_leaves_no_session_or_process(tmp_path: Path) -> None:
    """A real Ray, started as the trainer starts it (in a process of its own, as the trainer's is)."""
    from tests.train.test_local_e2e import is_loopback

    done = subprocess.run([sys.executable, "-c", LOCAL_RAY, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    session = Path(found["session"])
    assert found["existed"] and found["sockets"], found
    # when local_ray returns, none of its processes is left, the actor's worker included
    assert found["alive_after"] == [] and not found["actor_alive_after"], found
    assert all(is_loopback(address) for address, *_ in found["sockets"]), found["sockets"]
    assert not session.exists()
    latest = session.parent / "session_latest"
    assert not (latest.is_symlink() and Path(os.readlink(latest)) == session)


def test_ray_processes_that_outlive_shutdown_are_stopped() -> None:
    """A worker that outlives `ray.shutdown()` (seen once: a run's two actors still up after it returned,
    on a loaded machine) is stopped, a SIGTERM-proof one too; one already gone is no error."""
    from rlkit.train.ray_local import _running, stop_leftover_workers

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(120)"
    stubborn = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    assert stubborn.stdout.readline().strip() == "ready"
    gone.wait()
    procs = [psutil.Process(stubborn.pid)]
    started = time.monotonic()
    assert stop_leftover_workers(procs, wait_s=0.5) == [stubborn.pid]
    assert not _running(procs[0]) and not psutil.pid_exists(stubborn.pid)  # SIGKILLed and reaped
    assert time.monotonic() - started < 10
    assert stop_leftover_workers([], wait_s=0.5) == []


def test_the_reaper_removes_the_folders_the_lock_lists_and_nothing_else(tmp_path: Path) -> None:
    from rlkit.train.reaper import reap

    session = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
    scratch = tmp_path / "scratch" / "exp_8000"
    for folder in (session / "logs", scratch / "cache", scratch / "tmp"):
        folder.mkdir(parents=True)
    (session.parent / "session_latest").symlink_to(session)
    precious = tmp_path / "precious"
    precious.mkdir()
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code])  # it starts a grandchild, as vLLM starts its engine
    time.sleep(1.0)
    grandchildren = psutil.Process(child.pid).children()
    trainer = subprocess.Popen([sys.executable, "-c", "pass"])
    trainer.wait()
    path = tmp_path / "e.lock"
    path.write_text(json.dumps({"pid": trainer.pid, "project": "rlkit-test-none", "exp": "leftovers-none", "step": 1,
                                "phase": "rollout", "children": [[child.pid, psutil.Process(child.pid).create_time()]],
                                "leftovers": [str(session), str(scratch), str(precious)]}))
    message = reap(path, trainer.pid)
    child.wait(timeout=10)
    assert grandchildren and not any(g.is_running() and g.status() != psutil.STATUS_ZOMBIE for g in grandchildren)
    assert not session.exists() and not (session.parent / "session_latest").is_symlink() and not scratch.exists()
    assert precious.is_dir()  # not the shape of a run's leftover: a damaged lock never points cleanup at it
    assert "removed 2 folder(s)" in message and not path.exists()


def test_a_first_signal_asks_for_a_stop_and_a_second_one_interrupts() -> None:
    from rlkit.train.stop import GracefulStop, StopRequested

    notes: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    with GracefulStop(note=notes.append) as stop:
        with pytest.raises(KeyboardInterrupt, match="before the first step began"):  # starting up: nothing to save
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
        assert not stop.requested
        stop.arm()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what ray.init does (with its own handler)
        stop.reinstall()
        stop.check()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert stop.requested and "SIGTERM: stopping after the step in flight" in notes[0]
        with pytest.raises(StopRequested):
            stop.check()
        with pytest.raises(KeyboardInterrupt, match="second signal"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_that_lands_while_the_rollout_finishes_still_abandons_the_step(monkeypatch) -> None:
    """Unit test with a fake `ray` module: the signal arrives inside the last `ray.wait`, which reports the
    rollout done. The step is abandoned (after saving the last finished one), not carried on into the update."""
    import types

    from rlkit.train.local import LocalTrainer
    from rlkit.train.stop import GracefulStop, StopRequested

    trainer = object.__new__(LocalTrainer)
    trainer.stop = GracefulStop()
    trainer.progress = types.SimpleNamespace(phase=lambda text: None, trials=lambda counts, kind: None)
    trainer._counts = {}
    saved: list[str] = []
    trainer._save_last = lambda: saved.append("step 1")

    def wait(refs, timeout):  # the rollout finishes while the signal handler runs
        trainer.stop.signum = signal.SIGINT
        return refs, []

    fake_ray = types.SimpleNamespace(wait=wait, get=lambda ref, timeout=None: "result")
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    rollout = types.SimpleNamespace(progress=types.SimpleNamespace(remote=lambda: None))
    with pytest.raises(StopRequested):
        trainer._wait("ref", rollout, "step 2: rollout")
    assert saved == ["step 1"]


def test_a_stop_is_bounded_in_time() -> None:
    from rlkit.train.stop import GracefulStop

    with GracefulStop(deadline_s=0.3) as stop, pytest.raises(KeyboardInterrupt, match="longer than 0 s"):
        stop.arm()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # an update that would not end


def test_the_stop_message_says_what_was_saved(tmp_path: Path) -> None:
    from rlkit.train.stop import GracefulStop, RunStopped, interrupted_message, stopped_message

    assert stopped_message("e", signal.SIGINT, 1, 1) == ("stopped (SIGINT) after step 1: checkpoint global_step_1 "
                                                         "saved; the same command resumes e from step 1")
    off = stopped_message("e", signal.SIGTERM, 3, 0, "TRAINER_SAVE_FREQ <= 0 turns checkpoints off")
    assert "no checkpoint" in off and "starts e from step 0" in off and "resumes" not in off
    assert "resumes e from global_step_2 and redoes steps 3-3" in stopped_message("e", signal.SIGINT, 3, 2, "x")
    assert "before step 1 finished: nothing to save" in stopped_message("e", signal.SIGINT, 0, 0)
    assert interrupted_message(tmp_path) == ("interrupted: sandboxes, Ray and vLLM were stopped; the same command "
                                             "starts from step 0 (there is no checkpoint)")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert "resumes from checkpoint global_step_4" in interrupted_message(tmp_path)
    stop = GracefulStop()
    stop.raise_if_stopped("e", 1, 1, 4)  # no signal: nothing
    stop.signum = signal.SIGINT
    with pytest.raises(RunStopped) as caught:
        stop.raise_if_stopped("e", 2, 2, 4)
    assert caught.value.saved_step == 2 and "global_step_2 saved" in str(caught.value)


def test_attempts_are_numbered_across_restarts(tmp_path: Path) -> None:
    from rlkit.train.runlog import MetricsLog, read_jsonl

    paths = RunPaths(tmp_path, "p", "e")
    for from_step in (0, 2):
        log = MetricsLog(paths, "console,file", echo=None)
        log.mark_attempt(from_step, 5, "run.env")
        log.log(from_step + 1, {"x": 1.0})
        log.close()
    markers = [json.loads(line) for line in paths.attempts.read_text().splitlines()]
    assert [(m["attempt"], m["from_step"], m["pid"]) for m in markers] == [(1, 0, os.getpid()), (2, 2, os.getpid())]
    assert [r["step"] for r in read_jsonl(paths.jsonl)] == [1, 3]
    assert sum(line.startswith("[rlkit] attempt ") for line in paths.console_log.read_text().splitlines()) == 2
    older = RunPaths(tmp_path, "p", "old")  # a log from before attempt markers: the next start is a restart
    older.logs.mkdir(exist_ok=True)
    older.jsonl.write_text(json.dumps({"step": 1, "data": {}}) + "\n")
    assert MetricsLog(older, "file", echo=None).mark_attempt(1, 5) == 2
    assert sys.executable  # (the interpreter the reaper and the peak measurement run on)


def test_the_reaper_gives_rays_agents_a_short_grace_and_servers_the_full_one(tmp_path: Path) -> None:
    """After a kill -9 the trainer's GCS and raylet are gone with it (Ray's fate sharing), and Ray's agents
    sit out SIGTERM; the reaper gives them RAY_GRACE_S, not the grace vLLM and the proxy get."""
    from rlkit.train import reaper

    assert reaper.is_ray_process("ray::DashboardAgent") and reaper.is_ray_process("ray::IDLE")
    assert reaper.is_ray_process("/v/bin/python -u /v/lib/python3.12/site-packages/ray/dashboard/agent.py --x")
    assert not reaper.is_ray_process("/v/.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server")
    assert not reaper.is_ray_process("VLLM::EngineCore") and not reaper.is_ray_process("")

    ignores_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    agent = subprocess.Popen(["ray::DashboardAgent", "-c", ignores_term], executable=sys.executable,
                             stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().strip() == "up"
    started = time.monotonic()
    stopped = reaper.stop_processes([[agent.pid, psutil.Process(agent.pid).create_time()]])
    took = time.monotonic() - started
    assert stopped == [agent.pid] and not psutil.pid_exists(agent.pid)  # psutil reaped it: killed, not waited for
    assert took < reaper.TERM_GRACE_S, took  # the agent was killed after RAY_GRACE_S, not the servers' grace
