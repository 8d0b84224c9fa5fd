"""Sandbox ownership from labels: orphans of dead or reused owners, live runs, other uids, other hosts,
sandboxes with no owner recorded; the owner is the real uid, whatever $USER / $LOGNAME say."""

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
    assert labels[L.OWNER_PID] == str(os.getpid()) and labels[L.OWNER_UID] == str(os.getuid())
    assert abs(float(labels[L.OWNER_START]) - O.process_start(os.getpid())) < 1


def test_ownership_is_the_real_uid_not_the_environment(monkeypatch, tmp_path: Path) -> None:
    import pwd

    monkeypatch.setenv("USER", "mallory")
    monkeypatch.setenv("LOGNAME", "mallory")
    assert O.me() == pwd.getpwuid(os.getuid()).pw_name and O.uid() == os.getuid()
    labels = SandboxLabels().as_dict()
    assert labels[L.OWNER_UID] == str(os.getuid()) and labels[L.OWNER_USER] != "mallory"
    # a sandbox of uid+1 stays another user's even when it is labelled with the name $USER claims
    theirs = _labels(**{L.OWNER_UID: str(os.getuid() + 1), L.OWNER_USER: "mallory", L.OWNER_PID: str(_dead_pid())})
    state, why = verdict(theirs, tmp_path)
    assert state is Verdict.OTHER_USER and f"uid {os.getuid() + 1}" in why
    assert not Policy(tmp_path).decide(theirs, None)[0]


def test_a_sandbox_without_owner_labels_is_reported_not_removed_unless_named(tmp_path: Path) -> None:
    bare = {L.MANAGED: "1", L.PROJECT: "p", L.EXPERIMENT: "e"}
    assert verdict(bare, tmp_path)[0] is Verdict.UNOWNED
    go, why = Policy(tmp_path).decide(bare, None)
    assert not go and "--experiment" in why
    assert Policy(tmp_path).decide(bare, "e")[0]  # asked for by name
    old = {**bare, L.OWNER_USER: O.me(), L.OWNER_PID: str(_dead_pid())}  # labelled before the uid label
    assert verdict(old, tmp_path)[0] is Verdict.UNOWNED


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
    state, why = verdict(_labels(**{L.OWNER_UID: "4242", L.OWNER_USER: "alice"}), tmp_path)
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
    live, theirs = _labels(), _labels(**{L.OWNER_UID: "4242", L.OWNER_PID: str(_dead_pid())})
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
