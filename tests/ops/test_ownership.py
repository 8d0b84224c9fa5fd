"""Sandbox ownership from labels: orphans of dead or reused owners, live runs, other users, other hosts."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from rlkit.config import owner as O
from rlkit.ops.cleanup import Policy
from rlkit.ops.ownership import Verdict, verdict
from rlkit.sandbox import labels as L
from rlkit.sandbox.labels import SandboxLabels


def _labels(**kw: str) -> dict[str, str]:
    base = SandboxLabels(project="p", experiment="e").as_dict()
    base.update(kw)
    return base


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_labels_name_the_owner() -> None:
    labels = SandboxLabels().as_dict()
    assert labels[L.OWNER_PID] == str(os.getpid()) and labels[L.OWNER_USER] == L.label_value(O.me())
    assert abs(float(labels[L.OWNER_START]) - O.process_start(os.getpid())) < 1


def test_owner_env_is_inherited(monkeypatch) -> None:
    monkeypatch.setenv(O.OWNER_PID_ENV, "4242")
    monkeypatch.setenv(O.OWNER_START_ENV, "12.5")
    labels = SandboxLabels().as_dict()
    assert (labels[L.OWNER_PID], labels[L.OWNER_START]) == ("4242", "12.5")


def test_verdicts_on_this_host(tmp_path: Path) -> None:
    assert verdict(_labels(), tmp_path)[0] is Verdict.LIVE
    assert verdict(_labels(**{L.OWNER_PID: str(_dead_pid())}), tmp_path)[0] is Verdict.ORPHAN
    state, why = verdict(_labels(**{L.OWNER_START: "1.00"}), tmp_path)  # my pid, another start: reused
    assert state is Verdict.ORPHAN and "reused" in why
    assert verdict({L.MANAGED: "1", L.PROJECT: "p"}, tmp_path)[0] is Verdict.ORPHAN  # before owner labels
    state, why = verdict(_labels(**{L.OWNER_USER: "alice"}), tmp_path)
    assert state is Verdict.OTHER_USER and "alice" in why


def _lock(root: Path, exp: str, beat: dt.datetime) -> None:
    (root / "logs").mkdir(exist_ok=True)
    (root / "logs" / f"{exp}.lock").write_text(json.dumps(
        {"pid": 1, "host": "node-7", "user": O.me(), "heartbeat": beat.isoformat(), "exp": exp}))


def test_verdicts_on_another_host_read_the_run_lock(tmp_path: Path) -> None:
    remote = _labels(**{L.OWNER_HOST: "node-7", L.EXPERIMENT: "e_val"})
    assert verdict(remote, tmp_path)[0] is Verdict.UNKNOWN
    _lock(tmp_path, "e", dt.datetime.now(dt.UTC))
    assert verdict(remote, tmp_path)[0] is Verdict.LIVE  # a validation sandbox belongs to run e
    _lock(tmp_path, "e", dt.datetime.now(dt.UTC) - dt.timedelta(seconds=O.STALE_S + 60))
    assert verdict(remote, tmp_path)[0] is Verdict.ORPHAN


def test_policy_force_needs_the_named_run_and_other_users_need_a_flag(tmp_path: Path) -> None:
    live, theirs = _labels(), _labels(**{L.OWNER_USER: "alice", L.OWNER_PID: str(_dead_pid())})
    assert not Policy(tmp_path).decide(live, None)[0]
    assert not Policy(tmp_path, force=True).decide(live, None)[0]
    assert Policy(tmp_path, force=True).decide(live, "e")[0]
    assert not Policy(tmp_path).decide(theirs, None)[0]
    assert Policy(tmp_path, other_users=True).decide(theirs, None)[0]


def test_a_named_live_run_of_another_process_needs_force(tmp_path: Path) -> None:
    import psutil

    parent = psutil.Process(os.getppid())  # alive, and not the caller
    other = _labels(**{L.OWNER_PID: str(parent.pid), L.OWNER_START: f"{parent.create_time():.2f}"})
    assert not Policy(tmp_path).decide(other, "e")[0]
    assert Policy(tmp_path, force=True).decide(other, "e")[0]
    assert Policy(tmp_path).decide(_labels(), "e") == (True, "the caller's own run")  # a trainer's own teardown
