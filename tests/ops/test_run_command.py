"""`rlkit run CFG`: refuses when a check is FATAL; otherwise starts train.sh detached (nohup setsid) and returns."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import psutil
import pytest

from rlkit.config import owner as O
from tests.validate.helpers import FakeDockerDaemon, Workspace


@pytest.fixture
def ws(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws = Workspace(tmp_path, tiny_model_dir)
    ws.write_site(DOCKER_HOST=f"unix://{tmp_path / 'd.sock'}")
    for key, value in ws.environ().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # the GPU check: skipped, as on any CPU box
    return ws


def test_run_refuses_while_the_same_run_is_in_flight(ws: Workspace, capsys, monkeypatch) -> None:
    from rlkit.cli import run
    from rlkit.launch import background

    config = ws.config()
    lock = ws.root / "out" / "logs" / "exp.lock"
    lock.parent.mkdir(parents=True)
    now = dt.datetime.now(dt.UTC).isoformat()
    lock.write_text(json.dumps({"pid": os.getpid(), "host": O.host(), "user": O.me(), "heartbeat": now, "exp": "exp"}))
    started = []
    monkeypatch.setattr(background, "launch_command", lambda c, o=None: started.append(c) or ["true"])
    with FakeDockerDaemon(ws.root / "d.sock"):
        assert run.main([str(config)]) == 1
    out = capsys.readouterr().out
    assert "✗ FATAL run_in_flight: exp is already running" in out and "not started" in out
    assert started == [] and not list(lock.parent.glob("train_*.out"))


def test_run_starts_detached_and_returns(ws: Workspace, capsys, monkeypatch) -> None:
    from rlkit.cli import run
    from rlkit.launch import background

    config = ws.config()
    marker = ws.root / "ran"
    fake_train = ws.root / "train.sh"  # stands in for scripts/train/train.sh: a real training run is too big here
    fake_train.write_text(f"echo training $1; sleep 30; touch {marker}\n")
    monkeypatch.setattr(background, "REPO_ROOT", ws.root)
    (ws.root / "scripts" / "train").mkdir(parents=True)
    fake_train.rename(ws.root / "scripts" / "train" / "train.sh")
    with FakeDockerDaemon(ws.root / "d.sock"):
        assert run.main([str(config)]) == 0
    out = capsys.readouterr().out
    pid = int(out.split("✓ started", 1)[1].split("pid ", 1)[1].split()[0])  # warnings above may name pids too
    log = ws.root / "out" / "logs" / f"train_{dt.datetime.now():%m%d}.out"
    assert f"log:    {log}" in out and f"tail -f {log}" in out and "rlkit status" in out
    proc = psutil.Process(pid)
    try:
        assert proc.is_running() and not marker.exists()  # returned at once, the run goes on
        for _ in range(600):  # a loaded machine takes a while to get through nohup and setsid to bash
            if "training" in log.read_text():
                break
            time.sleep(0.05)
        assert f"training {config.resolve()}" in log.read_text()
        assert os.getsid(pid) == pid  # its own session: a closed terminal or Ctrl-C does not reach it
    finally:
        proc.kill()
        proc.wait(10)
