"""Pieces of the local trainer's loop: step arithmetic, metric lines, the run lock and the reaper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.config.paths import RunPaths
from rlkit.launch import lock as lock_mod
from rlkit.rollout.records import Outcome, StepResult, TokenSegment, TrialRecord
from rlkit.train.local_config import due, total_steps
from rlkit.train.resume import latest_step
from rlkit.train.runlog import MetricsLog, console_line, read_jsonl
from rlkit.train.step_metrics import rollout_metrics, val_metrics


class Cfg:
    TOTAL_STEPS = 0
    TOTAL_EPOCHS = 3
    TRAIN_BSZ = 2


def test_total_steps_from_epochs_or_the_cap() -> None:
    assert total_steps(Cfg(), 7) == 3 * 3  # 7 rows // 2 per step = 3 full batches per epoch
    capped = Cfg()
    capped.TOTAL_STEPS = 8
    assert total_steps(capped, 7) == 8


def test_save_and_test_frequency_follow_verl() -> None:
    assert [s for s in range(1, 11) if due(s, 4, 10)] == [4, 8, 10]
    assert not any(due(s, -1, 10) for s in range(1, 11))


def test_latest_step_reads_verls_marker(tmp_path: Path) -> None:
    assert latest_step(tmp_path) == 0
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6\n")
    assert latest_step(tmp_path) == 6


def test_an_interrupted_runs_later_steps_are_set_aside(tmp_path: Path) -> None:
    from rlkit.train.resume import set_aside_steps_after

    for name in ("step_1", "step_2", "step_3", "step_10"):
        (tmp_path / name).mkdir()
    moved = set_aside_steps_after(tmp_path, 2)
    assert sorted(p.name.split(".")[0] for p in moved) == ["step_10", "step_3"]
    assert sorted(p.name for p in tmp_path.iterdir() if "." not in p.name) == ["step_1", "step_2"]
    assert set_aside_steps_after(tmp_path / "missing", 0) == []


def test_a_fresh_start_sets_aside_every_earlier_step_and_a_resume_only_later_ones(tmp_path: Path) -> None:
    """An earlier run's val_trials/step_0 is not this run's "before" (RESUME_MODE=disable, a new
    MODEL_PATH under the same EXP_NAME): a fresh start moves it aside, so validation reruns it."""
    from rlkit.train.resume import set_aside_stale_steps

    for name in ("step_0", "step_4", "step_8"):
        (tmp_path / name).mkdir()
    (tmp_path / "step_0" / "results.jsonl").write_text('{"task_id": "t"}\n')
    assert sorted(p.name.split(".")[0] for p in set_aside_stale_steps(tmp_path, 4)) == ["step_8"]
    assert sorted(p.name.split(".")[0] for p in set_aside_stale_steps(tmp_path, 0)) == ["step_0", "step_4"]
    assert not (tmp_path / "step_0").exists()


def test_console_line_is_verls_format() -> None:
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    data = {"critic/rewards/mean": 0.25, "actor/pg_loss": -0.0125, "training/global_step": 3, "note": "x"}
    assert console_line(3, data) == concat_dict_to_str(data, step=3)


def test_metrics_log_appends_console_and_jsonl(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "p", "e")
    echoed: list[str] = []
    for step in (1, 2):
        log = MetricsLog(paths, "console,file", echo=echoed.append)  # reopened, as a resumed run does
        log.log(step, {"critic/rewards/mean": step / 4, "timing_s/step": float("nan")})
        log.close()
    lines = paths.console_log.read_text().splitlines()
    assert lines == ["step:1 - critic/rewards/mean:0.25", "step:2 - critic/rewards/mean:0.5"] == echoed
    assert read_jsonl(paths.jsonl) == [{"step": 1, "data": {"critic/rewards/mean": 0.25, "timing_s/step": None}},
                                       {"step": 2, "data": {"critic/rewards/mean": 0.5, "timing_s/step": None}}]


def test_tensorboard_events_land_under_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    paths = RunPaths(tmp_path, "p", "e")
    log = MetricsLog(paths, "file,tensorboard", echo=None)
    log.log(1, {"critic/rewards/mean": 0.5})
    log.close()
    assert list(paths.tensorboard.glob("events.out.tfevents.*"))
    assert not paths.console_log.exists()


def _record(uid: str, reward: float, outcome: Outcome = Outcome.FAILED_TESTS, masked: bool = False) -> TrialRecord:
    seg = TokenSegment(prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1],
                       response_logprobs=[-0.1, 0.0, -0.2])
    return TrialRecord(uid=uid, task_id=uid, session=f"s-{uid}-{reward}", outcome=outcome, reward=reward,
                       masked=masked, segments=[] if masked else [seg], num_turns=2)


def test_rollout_metrics_use_verl_names_over_graded_trials() -> None:
    from rlkit.rollout.summary import summarize

    records = [_record("a", 1.0, Outcome.PASSED), _record("a", 0.0, Outcome.CALL_LIMIT),
               _record("b", 0.0, Outcome.SANDBOX_ERROR, masked=True)]
    result = StepResult(step=1, records=records, summary=summarize(1, records, 3.0))
    m = rollout_metrics(result)
    assert m["critic/score/mean"] == m["critic/rewards/mean"] == 0.5
    assert m["response_length/mean"] == 3.0 and m["response_length/clip_ratio"] == 0.5
    assert m["num_turns/mean"] == 2.0 and m["rollout/masked"] == 1.0
    assert m["rollout/outcome/sandbox_error"] == 1.0


def test_val_metrics_from_the_eval_report() -> None:
    from rlkit.rollout.passes import TaskTally, pass_at_k_report

    tallies = {"t1": TaskTally(task_id="t1", attempts=3, graded=2, passed=1),
               "t2": TaskTally(task_id="t2", attempts=2, graded=2, passed=0)}
    m = val_metrics(pass_at_k_report(tallies, 2), {"t1": "rlkit", "t2": "rlkit"})
    assert m == {"val-core/rlkit/reward/mean@2": 0.25, "val/pass@1": 0.25, "val/pass@2": 0.5,
                 "val/pass@1_stderr": pytest.approx((0.5 * 0.5 / 2) ** 0.5 / 2)}


def test_lock_refuses_a_live_run_and_takes_over_a_dead_one(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "e.lock"
    first = lock_mod.RunLock(path, project="p", exp="e").acquire()
    data = json.loads(path.read_text())
    assert {"pid", "host", "user", "started", "heartbeat", "step", "phase"} <= set(data)
    first.update(step=3, phase="rollout")
    assert json.loads(path.read_text())["step"] == 3
    other = json.loads(path.read_text())
    other["pid"] = 1  # init: alive, not ours
    path.write_text(json.dumps(other))
    from rlkit.errors import UserError

    with pytest.raises(UserError, match="already running"):
        lock_mod.RunLock(path, project="p", exp="e").acquire()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other["pid"] = dead.pid
    path.write_text(json.dumps(other))
    second = lock_mod.RunLock(path, project="p", exp="e").acquire()
    assert second.previous is not None and second.previous["pid"] == dead.pid
    second.release()
    first.release()
    assert not path.exists()


def test_reaper_stops_listed_processes_and_removes_the_lock_of_a_killed_trainer(tmp_path: Path) -> None:
    import psutil

    from rlkit.train.reaper import reap

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    trainer = subprocess.Popen([sys.executable, "-c", "pass"])
    trainer.wait()
    path = tmp_path / "e.lock"
    path.write_text(json.dumps({"pid": trainer.pid, "project": "rlkit-test-none", "exp": "reaper-none",
                                "step": 2, "phase": "update",
                                "children": [[child.pid, psutil.Process(child.pid).create_time()],
                                             [os.getpid(), 0.0]]}))  # wrong start time: never touched
    message = reap(path, trainer.pid)
    child.wait(timeout=10)
    assert f"stopped 1 process(es) [{child.pid}]" in message and not path.exists()


def test_reaper_leaves_a_cleanly_finished_run_alone(tmp_path: Path) -> None:
    from rlkit.train.reaper import reap

    path = tmp_path / "e.lock"
    assert reap(path, 12345) == "trainer finished cleanly"
    path.write_text(json.dumps({"pid": os.getpid()}))
    assert reap(path, 12345) == "trainer finished cleanly" and path.exists()


def test_reaper_process_exits_with_the_trainer(tmp_path: Path) -> None:
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    path = tmp_path / "e.lock"
    reaper = subprocess.Popen([sys.executable, "-m", "rlkit.train.reaper", str(path), str(trainer.pid)],
                              stdout=subprocess.PIPE, text=True)
    trainer.wait()
    out, _ = reaper.communicate(timeout=30)
    assert reaper.returncode == 0 and "trainer finished cleanly" in out


def test_tracking_config_and_logs_never_carry_a_secret(tmp_path: Path) -> None:
    import logging

    from rlkit.config.resolve import resolve
    from rlkit.train.local_config import secrets_masked_in_logs, tracking_config

    cfg = tmp_path / "run.env"
    cfg.write_text("WANDB_API_KEY=wk-s3cr3t-value\nEXP_NAME=run-${WANDB_API_KEY}\n")
    resolved = resolve(cfg, environ={})
    config = tracking_config(resolved)
    assert "WANDB_API_KEY" not in config and "s3cr3t" not in json.dumps(config)
    assert config["EXP_NAME"] == "run-****"

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    logging.getLogger().addHandler(handler)
    try:
        with secrets_masked_in_logs(resolved):
            logging.getLogger("rlkit.train.anything").warning("key is %s", "wk-s3cr3t-value")
    finally:
        logging.getLogger().removeHandler(handler)
    assert records == ["key is ****"]


def test_the_loopback_switch_goes_back_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that trains in-process and then starts a multi-node Ray (`ray start` inherits the
    environment) must not carry RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray refuses the worker's join."""
    import ray._private.ray_constants as constants

    from rlkit.train.ray_local import CLUSTER_SWITCH, loopback_only

    monkeypatch.delenv(CLUSTER_SWITCH, raising=False)
    was = constants.ENABLE_RAY_CLUSTER
    with loopback_only() as address:
        assert address == "127.0.0.1" and os.environ[CLUSTER_SWITCH] == "0" and constants.ENABLE_RAY_CLUSTER is False
    assert CLUSTER_SWITCH not in os.environ and constants.ENABLE_RAY_CLUSTER == was
    monkeypatch.setenv(CLUSTER_SWITCH, "1")
    with loopback_only():
        pass
    assert os.environ[CLUSTER_SWITCH] == "1"
