"""`rlkit.train` / `rlkit train CFG`: preflight, then DRY_RUN's plan or the trainer TRAINER names, here.

  PREFLIGHT_ONLY=1  resolve and run Run Validation; launch nothing.
  DRY_RUN=1         the fully expanded launch commands (after the static checks and the model's: its files
                    and window, which set --max-model-len), with the files they name
                    written (the agent-loop YAML); launch nothing.
  neither           preflight, then the trainer: local (rlkit.train.local, this machine) or verl
                    (main_ppo on Ray).

A FATAL finding raises `PreflightFailed` (nothing launched); a trainer that exits non-zero raises
`TrainerFailed`. The result says what was done and where the run's files are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.errors import TrainerFailed, TrainerUnavailable

if TYPE_CHECKING:
    from rlkit.config.paths import RunPaths
    from rlkit.config.resolve import ResolvedConfig
    from rlkit.validate.preflight import PreflightReport

# TRAINER value -> "module:function(resolved) -> exit code". The verl path registers here.
RUNNERS: dict[str, str] = {
    "local": "rlkit.train.local:train_local",
    "verl": "rlkit.train.verl_run:train_verl",
}


@dataclass
class TrainResult:
    """What `rlkit.train` did ("preflight": PREFLIGHT_ONLY, "dry_run": DRY_RUN, or "train"), and the run's files."""

    action: str
    trainer: str
    paths: RunPaths
    report: PreflightReport
    dry_run: str | None = None  # DRY_RUN: the launch commands
    last_step: int | None = None  # the last step the metrics logs hold
    checkpoint: Path | None = None  # the latest global_step_N folder
    metrics: dict[str, float] = field(default_factory=dict)  # that step's metrics

    def as_dict(self) -> dict[str, Any]:
        p = self.paths
        return {"action": self.action, "trainer": self.trainer, "project": p.project, "exp": p.exp,
                "root": str(p.root), "logs": str(p.console_log), "checkpoints": str(p.checkpoints),
                "trials": str(p.trials), "dry_run": self.dry_run, "last_step": self.last_step,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None, "metrics": self.metrics,
                "preflight": self.report.as_dict()}


def dry_run_text(resolved: ResolvedConfig) -> str:
    """What the chosen trainer will run. verl: the launch plan, with its files written (the
    agent-loop YAML the trainer line names), so the printed commands can be pasted as they are.
    local: the embedded trainer's vLLM, proxy and Ray. Nothing is launched."""
    if resolved.config.TRAINER.value == "local":
        from rlkit.train.local_dry_run import dry_run_text as local_dry_run

        return local_dry_run(resolved)
    from rlkit.launch.cluster import write_files
    from rlkit.launch.plan import build_plan

    plan = build_plan(resolved)
    write_files(plan)
    return plan.render()


def run_trainer(resolved: ResolvedConfig, *, console: Any = None) -> None:
    """The trainer TRAINER names, in this process; raises `TrainerFailed` when it exits non-zero."""
    from rlkit.monitor.collapse_watch import CollapseWatch
    from rlkit.registry import import_string

    name = resolved.config.TRAINER.value
    target = RUNNERS.get(name)
    if target is None:
        raise TrainerUnavailable(f"TRAINER={name} is not available in this version of rlkit yet; nothing was "
                                 "launched", key="TRAINER", file=resolved.where("TRAINER"),
                                 fix="TRAINER=local for the embedded trainer, or PREFLIGHT_ONLY=1 / "
                                     "DRY_RUN=1")
    runner = import_string(target)
    paths = resolved.run_paths()
    with CollapseWatch(paths, _announce(paths)):
        code = runner(resolved, console=console) if name == "local" else runner(resolved)  # type: ignore[operator]
    code = int(code)
    if code:
        raise TrainerFailed(f"the {name} trainer exited with code {code}", returncode=code)


def _announce(paths: RunPaths) -> Callable[[Any], None]:
    """A collapse named while the trainer runs: printed on its console and kept in logs/<exp>.log."""
    from rlkit.monitor.collapse_watch import collapse_lines
    from rlkit.train.runlog import note_lines

    def announce(found: Any) -> None:
        lines = collapse_lines(found)
        print("\n".join(lines), flush=True)
        note_lines(paths, lines)

    return announce


def train_resolved(resolved: ResolvedConfig, *, console: Any = None,
                   on_preflight: Callable[[PreflightReport], None] | None = None) -> TrainResult:
    from rlkit.validate.preflight import dry_run_checks, run_preflight

    c = resolved.config
    trainer, paths = c.TRAINER.value, resolved.run_paths()
    if c.DRY_RUN and not c.PREFLIGHT_ONLY:  # the plan needs the static checks and the model's (its window)
        report = run_preflight(resolved, only=dry_run_checks()).raise_if_fatal()
        if on_preflight:
            on_preflight(report)
        return TrainResult("dry_run", trainer, paths, report, dry_run=dry_run_text(resolved))
    report = run_preflight(resolved).raise_if_fatal()
    if on_preflight:
        on_preflight(report)
    if c.PREFLIGHT_ONLY:
        return TrainResult("dry_run" if c.DRY_RUN else "preflight", trainer, paths, report,
                           dry_run=dry_run_text(resolved) if c.DRY_RUN else None)
    run_trainer(resolved, console=console)
    return finished(TrainResult("train", trainer, paths, report))


def finished(result: TrainResult) -> TrainResult:
    """The last logged step, its metrics and the latest checkpoint, read from the run's files."""
    from rlkit.monitor.metrics import last_records
    from rlkit.ops.checkpoints import latest_step

    tail = last_records(result.paths, n=1)
    if tail:
        result.last_step, result.metrics = tail[-1][0], dict(tail[-1][1])
    step = latest_step(result.paths.checkpoints)
    folder = result.paths.checkpoints / f"global_step_{step}"
    result.checkpoint = folder if step is not None and folder.is_dir() else None
    return result
