"""rlkit's Python API: everything the `rlkit` command does, as functions with typed results.

`import rlkit` re-exports these; the CLI (rlkit/cli) parses arguments, calls one of them and renders
its result (`--json` prints the result's `as_dict()`). Nothing heavy is imported here: each function
imports what it needs when it runs, so `import rlkit` and `rlkit.check` stay fast.

A run config is given as a path or as a resolved config (`rlkit.resolve`). Keyword arguments in
upper case are config keys on top of every layer (`rlkit.check("my_run.env", TRAIN_BSZ=8)`): they
resolve exactly as a line of the run config would, and each value records the layer it came from
(`report.resolved.layer("TRAIN_BSZ")` is `override`). Errors are rlkit's classes (rlkit.errors): a
`UserError` carries `key`, `file`, `line` and `fix`; `PreflightFailed` also carries the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.api._inputs import argument_error, as_resolved, config_overrides, is_config

if TYPE_CHECKING:
    from rlkit.api.passes import Progress
    from rlkit.api.training import TrainResult
    from rlkit.config.resolve import ResolvedConfig
    from rlkit.launch.background import RunHandle
    from rlkit.monitor.status import RunStatus
    from rlkit.ops.checkpoints import MergeResult, PrunePlan
    from rlkit.ops.cleanup import CleanupReport
    from rlkit.rollout.passes import EvalResult, RolloutResult
    from rlkit.rollout.task_check import TaskCheckResult
    from rlkit.validate.preflight import PreflightReport

    Config = str | os.PathLike[str] | ResolvedConfig

__all__ = ["check", "ckpt_merge", "ckpt_prune", "cleanup", "eval", "resolve", "rollout", "run", "status",
           "tasks_check", "train"]


def resolve(config: Config, *, environ: dict[str, str] | None = None, **overrides: Any) -> ResolvedConfig:
    """Resolve a run config through its layers (default < site.env < axis modules < run config <
    process environment < overrides) without checking it.

    `environ` stands in for the process environment (default: os.environ). Returns the
    `ResolvedConfig`: `.config` holds the typed values, `.values[KEY]` each value's text, layer and
    origin (file:line, "environment", "override"), `.as_dict()` all of it with secrets masked.
    Raises `ConfigError` only when the run config cannot be read; bad values are reported by `check`.
    """
    return as_resolved(config, config_overrides("resolve", overrides), environ)


def check(config: Config, *, context: bool = False, environ: dict[str, str] | None = None,
          cache_dir: str | Path | None = None, only: Iterable[str] | None = None, **overrides: Any,
          ) -> PreflightReport:
    """Run Validation (`rlkit check CFG`): every check on the resolved config; launches nothing.

    `context=True` adds the checks of `rlkit check --context` (this run already in flight, the GPUs'
    owners). `only` limits the checks to those named. Returns the `PreflightReport`: `.ok` (no
    FATAL), `.findings`, `.fatal`, `.warnings`, `.resolved`, `.render()` (the text `rlkit check`
    prints) and `.as_dict()`. A FATAL finding is part of the report, not an exception.
    """
    from rlkit.validate.preflight import run_preflight

    resolved = as_resolved(config, config_overrides("check", overrides), environ)
    return run_preflight(resolved, cache_dir=cache_dir, only=only, context=context)


def train(config: Config, *, environ: dict[str, str] | None = None, console: Any = None,
          on_preflight: Callable[[PreflightReport], None] | None = None, **overrides: Any) -> TrainResult:
    """Train in this process; returns when the run ends (`rlkit train CFG`, `bash scripts/train/train.sh CFG`).

    Preflight first; PREFLIGHT_ONLY=1 stops after it, DRY_RUN=1 returns the launch commands; else
    the trainer TRAINER names runs (local: the embedded CPU trainer; verl: main_ppo on Ray).
    `console` (a rich Console) takes the local trainer's progress; `on_preflight(report)` is called
    once the checks pass, before anything starts. Returns a `TrainResult` (action, paths, the last
    step, its metrics, the latest checkpoint). Raises `PreflightFailed` on a FATAL finding (nothing
    started), `TrainerFailed` when the trainer exits non-zero; Ctrl-C stops the run (sandboxes, Ray
    and vLLM go with it) and raises KeyboardInterrupt; the same call resumes from the last checkpoint.
    """
    from rlkit.api.training import train_resolved

    resolved = as_resolved(config, config_overrides("train", overrides), environ)
    return train_resolved(resolved, console=console, on_preflight=on_preflight)


def run(config: Config, **overrides: Any) -> RunHandle:
    """Check, then start the run in the background and return at once (`rlkit run CFG`, `/rl:run`).

    Runs Run Validation plus the context checks; on a FATAL finding raises `PreflightFailed` and
    starts nothing. Otherwise starts `nohup setsid bash scripts/train/train.sh CFG --set K=V ...`
    (the overrides travel along) with its output in OUTPUT_DIR/logs/train_<MMDD>.out. Returns a
    `RunHandle`: `.pid`, `.log`, `.lock` (logs/<exp>.lock, which the trainer holds while it runs),
    `.warnings`, `.alive()`, `.wait(timeout)`, `.stop()`; `rlkit.status(handle)` reads its progress.
    """
    from rlkit.launch.background import start_background
    from rlkit.validate.preflight import run_preflight

    resolved = as_resolved(config, config_overrides("run", overrides))
    report = run_preflight(resolved, context=True).raise_if_fatal()
    handle = start_background(resolved.config_path, resolved.run_paths(), resolved.public_overrides(),
                              secrets=resolved.secret_overrides())
    handle.warnings = [finding.render() for finding in report.warnings]
    return handle


def status(target: Config | RunHandle | None = None, *, root: str | Path | None = None,
           **overrides: Any) -> RunStatus:
    """A run's state from its files (`rlkit status`, `/rl:status`): alive?, step k/N, step time, ETA,
    the first-step numbers with verdicts, and a collapse in progress (`.collapse`, rlkit.monitor.collapse).

    `target`: a run config (path or resolved, with overrides), a `RunHandle` from `rlkit.run`, an
    experiment name under `root`/logs, or None for the latest run there (`root` defaults to the
    current folder). Works on live, finished and crashed runs. Returns a `RunStatus` (`.live.state`,
    `.last_step`, `.eta_s`, `.numbers`, `.as_dict()`). Raises `UserError` when no such run exists.
    """
    from rlkit.launch.background import RunHandle
    from rlkit.monitor.run import locate, ref_of
    from rlkit.monitor.status import collect

    extra = config_overrides("status", overrides)
    if isinstance(target, RunHandle):
        target, extra = target.config, {**target.overrides, **extra}
    if is_config(target) or extra:
        if target is None:
            raise argument_error("status() takes overrides only with a run config")
        ref = ref_of(as_resolved(target, extra))
    else:
        ref = locate(None if target is None else str(target), Path(root) if root else None)
    return collect(ref)


def rollout(index: str | Path, *, model_path: str | None = None, agent: str | None = None, k: int = 4,
            min_pass_rate: float = 0.0, max_pass_rate: float = 1.0, inclusive: bool = False,
            config: Config | None = None, progress: Progress | None = None, **options: Any) -> RolloutResult:
    """k attempts per task of a task index, pass rates into the index, a difficulty-filtered index
    (`rlkit rollout INDEX`).

    The policy at `model_path` (served by vLLM behind the proxy, or by a vLLM already up at
    `upstream=`), or a reference `agent` ("oracle" or "nop"). `options` are `PassSettings` fields
    (out, scaffold, backend, max_sandboxes, max_resp, max_turns, temperature, ...); with `config`,
    unset ones come from the run config (upper-case keywords override it). Results go to
    `out`/results.jsonl as trials finish, so the same call resumes; `progress(totals, total)` follows
    them. Returns a `RolloutResult`: per-task pass rates, `.pass_rates` (the index with pass_rate
    filled) and `.filtered` (rows with min < p < max, or None when no task is inside the window).
    """
    from rlkit.api.passes import rollout_pass

    if (model_path is None) == (agent is None):
        from rlkit.errors import UserError

        raise UserError("give either a model_path or an agent", key="agent", fix="e.g. agent='oracle'")
    settings = _pass_settings("rollout", k, options, config)
    return rollout_pass(Path(index), model_path=model_path, agent=agent, settings=settings, low=min_pass_rate,
                        high=max_pass_rate, inclusive=inclusive, progress=progress)


def eval(model: str | Path, index: str | Path, *, k: int = 4, agent: str = "model",
         config: Config | None = None, progress: Progress | None = None, **options: Any) -> EvalResult:
    """pass@1 and pass@k of a model on a task index, unbiased estimator (`rlkit eval MODEL_DIR INDEX`).

    `model`: a Hugging Face model folder (e.g. `rlkit.ckpt_merge(...).target`); `agent="oracle"` /
    `"nop"` evaluates the reference agents instead. `options` and `config` as for `rollout`. Writes
    `out`/eval_results.json (default evals/<index stem>/) and resumes from `out`/results.jsonl.
    Returns an `EvalResult` (`.overall` {"pass@1": ..., "pass@k": ...}, `.tasks`, `.path`).
    """
    from rlkit.api.passes import eval_pass

    settings = _pass_settings("eval", k, options, config)
    return eval_pass(str(model), Path(index), agent=agent, settings=settings, progress=progress)


def _pass_settings(function: str, k: int, options: dict[str, Any], config: Config | None) -> Any:
    from rlkit.api.passes import PassSettings

    keys = {name: options.pop(name) for name in list(options) if name.isupper()}
    unknown = set(options) - PassSettings.names()
    if unknown:
        raise argument_error(f"{function}() got unexpected keyword argument(s) {', '.join(sorted(unknown))}")
    if keys and config is None:
        raise argument_error(f"{function}() takes config keys ({', '.join(keys)}) only with config=")
    resolved = as_resolved(config, keys) if config is not None else None
    return PassSettings(attempts=k, **options).with_config(resolved)


def cleanup(config: Config | None = None, *, project: str | None = None, experiment: str | None = None,
            force: bool = False, other_users: bool = False, sandboxes_only: bool = False,
            dry_run: bool = False, ports: Iterable[int] = (), output_dir: str | Path | None = None, k8s: bool | None = None,
            namespace: str | None = None, **overrides: Any) -> CleanupReport:
    """Remove what dead runs left behind, and only that (`rlkit cleanup`).

    Your sandboxes whose owner process is gone (docker; k8s pods when a cluster is configured), and
    unless `sandboxes_only`, rlkit's orphaned vLLM / proxy / Ray processes and stale /tmp leftovers.
    A live run's sandboxes go only with `experiment=` and `force=True`; other users' only with
    `other_users`. With `config`, its OUTPUT_DIR (run locks), ports and PROJECT_NAME are used.
    `dry_run` removes nothing. Returns the `CleanupReport` (.removed, .kept, .errors, .warnings).
    """
    from rlkit.config.schema import DEFAULT_PROXY_PORT
    from rlkit.errors import UserError
    from rlkit.ops.cleanup import Policy
    from rlkit.ops.cleanup import cleanup as clean

    extra = config_overrides("cleanup", overrides)
    if force and not experiment:
        raise UserError("force needs an experiment: a live run's sandboxes go only when you name the run",
                        key="--force", fix="pass --experiment RUN (experiment=...) with --force")
    root, port_list = Path(output_dir) if output_dir else Path.cwd(), list(ports)
    if config is not None:
        resolved = as_resolved(config, extra)
        c = resolved.config
        root = Path(output_dir) if output_dir else (resolved.path("OUTPUT_DIR") or resolved.root)
        port_list = port_list or [c.PROXY_PORT, c.DASHBOARD_PORT, c.RAY_PORT]
        project = project or c.PROJECT_NAME or None
    elif extra:
        raise argument_error("cleanup() takes config keys only with a run config")
    policy = Policy(output_root=root.resolve(), force=force, other_users=other_users)
    return clean(project, experiment, dry_run=dry_run, k8s=k8s, processes=not sandboxes_only,
                 tmp=not sandboxes_only, ports=port_list or [DEFAULT_PROXY_PORT], policy=policy,
                 namespace=namespace)


def tasks_check(source: str | Path, *, concurrency: int = 4, write_index: bool = False,
                trials_dir: str | Path | None = None, registry: str | None = None, network: str | None = None,
                progress: Callable[[int, int, str, str], None] | None = None,
                log: Callable[[str], None] | None = None) -> TaskCheckResult:
    """Task-set health (`rlkit tasks check`): the oracle must get 1 and the no-op agent 0 on every task.

    `source`: a task dir, a dir of task dirs, or a task index (.parquet). Builds missing images
    (offline), then runs both agents in real sandboxes, `concurrency` at once. `write_index` (an
    index only) records a task_ok column that preflight warns about. `registry` defaults to
    $REGISTRY. Returns a `TaskCheckResult` (`.ok`, `.broken`, one `TaskHealth` per task with its problems).
    """
    from rlkit.rollout.task_check import run_task_check

    return run_task_check(Path(source), concurrency=concurrency, write_index=write_index,
                          trials_dir=Path(trials_dir) if trials_dir else None,
                          registry=registry or os.environ.get("REGISTRY") or None, network=network,
                          progress=progress, log=log)


def ckpt_merge(path: str | Path, target: str | Path | None = None, *, keep_dtype: bool = False) -> MergeResult:
    """Merge a checkpoint into a Hugging Face model folder with verl's model merger (`rlkit ckpt merge`).

    `path`: a run's checkpoint folder (its latest step), a global_step_N, or its actor/. `target`
    defaults to global_step_N/merged_hf. verl's merger writes bf16; `keep_dtype=True` keeps the dtype the
    checkpoint holds (float32 in the embedded run, whose policy bf16 rounding changes). Returns a
    `MergeResult` (`.target` is the model folder, ready for `rlkit.eval`; `.dtype` what it holds). Raises
    `UserError` on an incomplete checkpoint or a failed merge.
    """
    from rlkit.ops.checkpoints import merge_checkpoint

    return merge_checkpoint(Path(path), Path(target) if target else None, keep_dtype=keep_dtype)


def ckpt_prune(root: Config, *, yes: bool = False, include_latest: bool = False,
               **overrides: Any) -> PrunePlan:
    """Delete optimizer shards, keep the model shards and huggingface/ (`rlkit ckpt prune`).

    `root`: a run's checkpoint folder (checkpoints/<project>/<exp>) or its run config (path or
    resolved, with overrides). Lists only, unless `yes`; the latest step stays whole unless
    `include_latest` (a resume then restarts the optimizer). Returns the `PrunePlan` (`.shards`,
    `.bytes`, `.deleted`, `.freed`).
    """
    from rlkit.ops.checkpoints import plan_prune, prune

    extra = config_overrides("ckpt_prune", overrides)
    if is_config(root) or extra or Path(root).is_file():
        folder = as_resolved(root, extra).run_paths().checkpoints
    else:
        folder = Path(root)
    plan = plan_prune(folder, include_latest=include_latest)
    if yes:
        prune(plan)
    return plan
