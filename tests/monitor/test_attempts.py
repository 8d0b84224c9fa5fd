"""A run that crashed and restarted: every reader keeps each step's latest attempt, and status and the
dashboard describe the latest attempt only (its liveness, reaper line, step time, k/N)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.monitor import metrics
from rlkit.monitor.run import RunRef
from rlkit.monitor.status import collect, render

PID_1, PID_2 = 4101, 4102


def _marker(attempt: int, from_step: int, pid: int, total: int = 3) -> dict:
    return {"event": "attempt", "attempt": attempt, "from_step": from_step, "total_steps": total, "pid": pid,
            "time": f"2026-11-30T1{attempt}:00:00+00:00", "config": "/nowhere/run.env"}


def _step(step: int, attempt: int, seconds: float) -> dict:
    return {"step": step, "data": {"critic/rewards/mean": attempt + step / 10, "timing_s/step": seconds}}


def write_restarted_run(root: Path, exp: str = "again") -> RunPaths:
    """Attempt 1 logs steps 0-2 (step time 100 s) and is killed in step 3 with no checkpoint after step 1;
    attempt 2 resumes from step 1 and logs steps 2-3 (step time 10 s), and is the run's end (3 steps)."""
    paths = RunPaths(root, "proj", exp)
    paths.logs.mkdir(parents=True)
    lines = [_marker(1, 0, PID_1), _step(0, 1, 5.0), _step(1, 1, 100.0), _step(2, 1, 100.0),
             _marker(2, 1, PID_2), _step(2, 2, 10.0), _step(3, 2, 10.0)]
    paths.jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines))
    paths.attempts.write_text("".join(json.dumps(x) + "\n" for x in lines if "event" in x))
    console = []
    for x in lines:
        if "event" in x:
            console.append("[rlkit] attempt " + json.dumps(x))
        else:
            console.append(f"step:{x['step']} - " + " - ".join(f"{k}:{v}" for k, v in x["data"].items()))
        console.append("(TaskRunner pid=1) some other line")
    paths.console_log.write_text("\n".join(console) + "\n")
    return paths


def test_every_reader_keeps_each_steps_latest_attempt(tmp_path: Path) -> None:
    from rlkit.train.runlog import read_jsonl

    paths = write_restarted_run(tmp_path)
    read = metrics.read_all(paths)
    assert list(read.steps) == [0, 1, 2, 3] and read.steps[2]["critic/rewards/mean"] == 2.2  # attempt 2's step 2
    assert [a.attempt for a in read.attempts] == [1, 2]
    assert [(r["step"], r["data"]["critic/rewards/mean"]) for r in read_jsonl(paths.jsonl)] == [
        (0, 1.0), (1, 1.1), (2, 2.2), (3, 2.3)]
    end = metrics.tail(paths, n=3)
    assert [s for s, _ in end.records] == [1, 2, 3] and end.attempt.attempt == 2 and end.attempt.pid == PID_2
    assert [s for s, _ in end.latest_records] == [2, 3]  # step 1 is attempt 1's
    paths.jsonl.unlink()  # the console log alone says the same
    assert list(metrics.read_all(paths).steps) == [0, 1, 2, 3]
    assert [s for s, _ in metrics.tail(paths, n=3).latest_records] == [2, 3]


def test_the_dashboard_replaces_its_curves_after_a_restart(tmp_path: Path) -> None:
    from rlkit.monitor.dashboard import metrics_after

    paths = write_restarted_run(tmp_path)
    text = paths.jsonl.read_text()
    cut = text.index('{"event": "attempt", "attempt": 2')
    paths.jsonl.write_text(text[:cut])
    first = metrics_after(paths, 0)
    assert first["steps"] == [0, 1, 2] and not first["replace"]
    paths.jsonl.write_text(text)  # attempt 2 appends: step 2 is redone
    again = metrics_after(paths, first["offset"])
    assert again["replace"] and again["steps"] == [0, 1, 2, 3]
    assert again["columns"]["critic/rewards/mean"] == [1.0, 1.1, 2.2, 2.3]
    assert metrics_after(paths, again["offset"])["steps"] == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_status_reads_the_latest_attempt_only(tmp_path: Path) -> None:
    paths = write_restarted_run(tmp_path)
    vllm_line = ("(APIServer pid=1) INFO 11-30 14:06:25 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 "
                 "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
                 "CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n")
    paths.vllm_log.write_text(vllm_line)
    old = time.time() - 7200
    os.utime(paths.vllm_log, (old, old))
    reaper = paths.logs / f"{paths.exp}_reaper.log"
    reaper.write_text(f"2026-11-30T10:30:00+00:00 trainer pid {PID_1} died at step 2 (rollout): removed 2 sandbox(es)\n")

    status = collect(RunRef(paths))  # no config: N comes from the attempt marker
    assert status.ref.total_steps == 3 and status.last_step == 3 and status.live.state == "finished"
    assert status.step_time_s == 10.0  # attempt 2's steps only, not attempt 1's 100 s
    assert status.reaper is None  # attempt 1's crash, not this attempt's
    text = render(status)
    assert "step     3/3" in text and "attempt  2: restarted after step 1" in text and "reaper" not in text
    assert "last reading (the run is not running)" in text and "2h00m ago" in text
    as_json = status.as_dict()
    assert as_json["vllm"]["current"] is False and as_json["vllm"]["age_s"] > 7000

    # attempt 2 crashes too: now its reaper line is the one shown, and a lock of a dead trainer says dead
    reaper.write_text(reaper.read_text() + f"2026-11-30T12:30:00+00:00 trainer pid {PID_2} died at step 3 (update)\n")
    now = dt.datetime.now(dt.UTC).isoformat()
    paths.lock.write_text(json.dumps({"pid": _dead_pid(), "host": os.uname().nodename, "started": now,
                                      "heartbeat": now, "project": "proj", "exp": paths.exp, "step": 3}))
    from rlkit.config.owner import host

    assert os.uname().nodename == host()
    status = collect(RunRef(paths))
    assert status.live.state == "stale-lock" and not status.live.alive
    lock = json.loads(paths.lock.read_text())
    paths.lock.unlink()
    status = collect(RunRef(paths))
    assert status.reaper and f"pid {PID_2}" in status.reaper
    assert lock["pid"] != PID_2  # (the lock's pid was a stand-in)


def test_the_run_list_marks_dead_runs_and_defaults_to_a_live_or_finished_one(tmp_path: Path) -> None:
    from rlkit.monitor.dashboard import RunFolder

    done = write_restarted_run(tmp_path, "done")  # 3/3: finished
    crashed = RunPaths(tmp_path, "proj", "crashed")
    crashed.jsonl.write_text(json.dumps(_marker(1, 0, PID_1, total=8)) + "\n" + json.dumps(_step(1, 1, 9.0)) + "\n")
    crashed.attempts.write_text(json.dumps(_marker(1, 0, PID_1, total=8)) + "\n")
    now = dt.datetime.now(dt.UTC).isoformat()
    crashed.lock.write_text(json.dumps({"pid": _dead_pid(), "host": os.uname().nodename, "started": now,
                                        "heartbeat": now, "project": "proj", "exp": "crashed", "step": 1}))
    later = time.time() + 5
    os.utime(crashed.jsonl, (later, later))  # the dead run is the newest
    folder = RunFolder(tmp_path)
    runs = folder.runs()
    assert [(r["exp"], r["state"], r["running"]) for r in runs] == [("crashed", "dead", False),
                                                                     ("done", "finished", False)]
    assert runs[1]["step"] == 3 and runs[1]["total_steps"] == 3
    assert folder.default_run(runs) == "done"

    live = RunPaths(tmp_path, "proj", "live")  # a lock held by a running process (this one)
    live.jsonl.write_text(json.dumps(_marker(1, 0, os.getpid(), total=8)) + "\n")
    live.lock.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "started": now,
                                     "heartbeat": now, "project": "proj", "exp": "live", "step": 0}))
    runs = folder.runs()
    assert {r["exp"]: r["state"] for r in runs}["live"] == "running"
    assert folder.default_run(runs) in {"live", "done"} and folder.default_run(runs) != "crashed"
    assert done.exp in {r["exp"] for r in runs}


def test_a_validation_line_at_a_resume_adds_to_its_step_instead_of_replacing_its_training_metrics(
        tmp_path: Path) -> None:
    """verl validates at the step it resumes from (val_before_train) and logs `step:K - val-...` on a line of
    its own, after the attempt marker: step K's training numbers stay, the validation ones join them."""
    from rlkit.monitor.dashboard import metrics_after

    paths = RunPaths(tmp_path, "proj", "verl")
    paths.logs.mkdir(parents=True)
    val = {"val-core/tasks/reward/mean@1": 0.5}
    lines = [_marker(1, 0, PID_1), {"step": 0, "data": val}, _step(1, 1, 20.0), _step(2, 1, 20.0),
             _marker(2, 2, PID_2), {"step": 2, "data": {"val-core/tasks/reward/mean@1": 0.6}}, _step(3, 2, 30.0)]
    paths.attempts.write_text("".join(json.dumps(x) + "\n" for x in lines if "event" in x))
    console = ["[rlkit] attempt " + json.dumps(x) if "event" in x else
               f"step:{x['step']} - " + " - ".join(f"{k}:{v}" for k, v in x["data"].items()) for x in lines]
    paths.console_log.write_text("\n".join(console) + "\n")
    step2 = {"critic/rewards/mean": 1.2, "timing_s/step": 20.0, "val-core/tasks/reward/mean@1": 0.6}
    assert metrics.read_all(paths).steps[2] == step2
    for n in (2, 3):  # the validation line is the last record read, or the one before the last
        assert dict(metrics.tail(paths, n=n).records)[2] == step2
    assert [s for s, _ in metrics.tail(paths, n=2).records] == [2, 3]
    assert [s for s, _ in metrics.tail(paths, n=3).latest_records] == [2, 3]

    # the dashboard: the client had everything up to the marker; the validation line comes in a later poll
    text = paths.console_log.read_text()
    cut = text.index("step:2 - val-core")
    paths.console_log.write_text(text[:cut])
    first = metrics_after(paths, 0)
    paths.console_log.write_text(text)
    again = metrics_after(paths, first["offset"])
    assert again["replace"] and again["steps"] == [0, 1, 2, 3]
    assert again["columns"]["critic/rewards/mean"][2] == 1.2 and again["columns"]["val-core/tasks/reward/mean@1"][2] == 0.6
