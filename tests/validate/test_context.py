"""Context checks (`rlkit check --context`): a run in flight, GPU ownership through a fake NVML, the skip path."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from rlkit.config import owner as O
from rlkit.validate import context as C
from rlkit.validate.findings import Context, Status
from tests.validate.helpers import Workspace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    from rlkit.config.resolve import resolve

    ws = Workspace(tmp_path, tmp_path / "model")
    return Context(resolved=resolve(ws.config(), ws.environ()), cache_dir=tmp_path / "cache")


def _lock(ctx: Context, **fields: object) -> Path:
    path = ctx.resolved.path("OUTPUT_DIR") / "logs" / "exp.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC).isoformat()
    data = {"pid": os.getpid(), "host": O.host(), "user": O.me(), "started": now, "heartbeat": now,
            "project": "proj", "exp": "exp", "step": 3, "phase": "rollout", **fields}
    path.write_text(json.dumps(data))
    return path


def test_a_live_lock_is_fatal_and_a_stale_one_a_warning(ctx: Context) -> None:
    _lock(ctx)
    [finding] = [f for f in C.run_in_flight(ctx) if "already running" in f.message]
    assert finding.status is Status.FATAL and f"pid {os.getpid()}" in finding.message and "step 3" in finding.message
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock(ctx, pid=dead.pid)
    findings = C.run_in_flight(ctx)
    assert not any(f.status is Status.FATAL for f in findings)
    assert any(f.status is Status.WARN and "stale lock" in f.message for f in findings)


def test_a_remote_lock_is_judged_by_its_heartbeat(ctx: Context) -> None:
    _lock(ctx, host="node-9")
    assert any(f.status is Status.FATAL for f in C.run_in_flight(ctx))
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=O.STALE_S + 30)).isoformat()
    _lock(ctx, host="node-9", heartbeat=old)
    assert not any(f.status is Status.FATAL for f in C.run_in_flight(ctx))


def _fake_nvml(gpus: dict[int, list[tuple[int, int]]], init_error: Exception | None = None) -> types.ModuleType:
    """pynvml with `gpus` = {index: [(pid, bytes), ...]}."""
    nvml = types.ModuleType("pynvml")

    def init() -> None:
        if init_error:
            raise init_error

    nvml.nvmlInit, nvml.nvmlShutdown = init, lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=m)
                                                           for p, m in gpus[h]]
    nvml.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    return nvml


USERS = {100: ("alice", "python train_other.py"), 200: (O.me(), "python -m vllm.entrypoints.openai.api_server"),
         300: (None, "")}


def test_gpu_held_by_another_user_is_fatal_own_is_a_warning(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml({0: [(100, 5 << 30)], 1: [(200, 1 << 30), (300, 0)],
                                                           2: [(100, 1)]}))  # GPUS_PER_NODE=2: GPU 2 not wanted
    findings = C.gpu_ownership(ctx, owner_of=USERS.__getitem__)
    fatal = [f for f in findings if f.status is Status.FATAL]
    assert len(fatal) == 1 and fatal[0].message.startswith("GPU 0: pid 100 holds 5120 MiB, user alice")
    own = [f for f in findings if "yours" in f.message]
    assert own[0].status is Status.WARN and "GPU 1: pid 200 holds 1024 MiB" in own[0].message
    assert "rlkit cleanup" in own[0].fix
    assert any("not visible here" in f.message for f in findings)
    assert not any("GPU 2" in f.message for f in findings)


def test_cuda_visible_devices_picks_the_gpus_and_free_gpus_pass(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml({0: [(100, 1 << 30)], 1: [], 2: []}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    [finding] = C.gpu_ownership(ctx, owner_of=USERS.__getitem__)
    assert finding.status is Status.OK and "GPU(s) 1,2" in finding.message


def test_no_nvml_is_a_warning_never_a_crash(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError_LibraryNotFound(Exception):
        pass

    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml({}, NVMLError_LibraryNotFound("not found")))
    [finding] = C.gpu_ownership(ctx)
    assert finding.status is Status.WARN and finding.message.startswith("skipped: NVML unavailable")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    [finding] = C.gpu_ownership(ctx)
    assert finding.status is Status.WARN and "nvidia-ml-py is not installed" in finding.message


def test_check_context_on_this_machine_skips_nvml_and_imports_no_heavy_module(ctx: Context) -> None:
    """The real path here (no GPU): `rlkit check --context` says ⚠ skipped, and loads no torch / ray / verl."""
    config = ctx.resolved.path("OUTPUT_DIR").parent / "run.env"
    code = ("import sys; from rlkit.cli.main import main; rc = main(['check', '--context', '--quiet', sys.argv[1]]);"
            "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'verl', 'vllm'}))")
    env = {**os.environ, "RLKIT_SITE_ENV": str(config.parent / "site.env"), "RLKIT_CACHE_DIR": str(config.parent)}
    done = subprocess.run([sys.executable, "-c", code, str(config)], cwd=ROOT, capture_output=True, text=True,
                          env=env, check=False)
    assert "HEAVY []" in done.stdout, done.stdout + done.stderr
    assert "run_in_flight: no run of exp in flight" in done.stdout, done.stdout
    line = next(x for x in done.stdout.splitlines() if "gpu_ownership" in x)
    assert line.strip().startswith("⚠ gpu_ownership: skipped:"), line
