"""`rlkit train` with TRAINER=verl: the launch plan executed (`rlkit.launch.cluster`), and this
run's sandboxes removed once Ray is stopped.

Before the launch, a resumed run (RESUME_MODE=auto, verl's latest checkpoint at step K) sets
aside the trial folders of steps after K (`step_<N>.interrupted-<time>`), as the local trainer
does: verl repeats those steps, and step_<N>/ then holds only the trials that step trained on.

Trials in flight when the run stops (Ctrl-C, SIGTERM, a failed step) leave their containers:
the agent-loop workers that would have removed them are gone with Ray. The teardown removes
the run's sandboxes (training and validation experiments) as the local trainer's does, and the
vLLM servers its rollout actors started: a vLLM engine process outlives its API server when Ray
kills the actor, so one whose owner is this launcher and still runs after Ray is stopped is
stopped here. After a kill -9 of the launcher the run's reaper (`rlkit.train.reaper`, started once the
lock is held, as the local trainer's) stops the run's Ray and servers, removes its sandboxes and the lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig


def remove_sandboxes(project: str, experiments: tuple[str, ...], *, k8s: bool) -> None:
    from rlkit.ops.cleanup import cleanup

    for exp in experiments:
        try:
            cleanup(project, exp, k8s=k8s, log=lambda line: print(f"teardown: {line}", flush=True))
        except Exception as exc:  # noqa: BLE001 -- teardown goes on; `rlkit cleanup` can finish it
            print(f"teardown: sandbox cleanup of {project}/{exp} failed: {exc}", flush=True)


def stop_own_servers(project: str, experiments: tuple[str, ...]) -> None:
    """Stop the vLLM and proxy processes of this run whose owner is this process (Ray is stopped by now)."""
    import os

    import psutil

    from rlkit.config.owner import OWNER_PID_ENV
    from rlkit.ops import procs

    mine = {str(os.getpid()), os.environ.get(OWNER_PID_ENV)} - {None}
    left = []
    for exp in experiments:
        for p in procs.scan([], project, exp):
            if p.kind not in ("vllm", "proxy"):
                continue
            try:
                owner = psutil.Process(p.pid).environ().get(OWNER_PID_ENV)
            except psutil.Error:
                continue
            if owner in mine:
                left.append(p)
    if left:
        stopped, errors = procs.stop(left)
        print(f"teardown: stopped {len(stopped)} server process(es) the rollout left: "
              f"{', '.join(f'{p.kind} {p.pid}' for p in stopped)}", flush=True)
        for error in errors:
            print(f"teardown: {error}", flush=True)


def teardown(project: str, experiments: tuple[str, ...], *, k8s: bool) -> None:
    try:
        stop_own_servers(project, experiments)
    except Exception as exc:  # noqa: BLE001 -- teardown goes on; `rlkit cleanup` can finish it
        print(f"teardown: stopping the rollout's servers failed: {exc}", flush=True)
    remove_sandboxes(project, experiments, k8s=k8s)


def train_verl(resolved: ResolvedConfig) -> int:
    from rlkit.config.paths import RunPaths
    from rlkit.config.schema import Backend
    from rlkit.launch.cluster import run
    from rlkit.launch.plan import is_head_node
    from rlkit.train.reaper import start_reaper
    from rlkit.train.resume import latest_step, set_aside_steps_after
    from rlkit.train.runlog import mark_attempt_files

    c = resolved.config
    paths = RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME or "default",
                     c.EXP_NAME or "default")
    start = 0
    if c.RESUME_MODE.value == "auto" and is_head_node(c.RAY_HEAD_ADDRESS, node_ip=c.NODE_IP):
        start = latest_step(paths.checkpoints)
        for trials in (paths.trials, paths.val_trials):
            for moved in set_aside_steps_after(trials, start):
                print(f"set aside an interrupted step's trials: {moved}", flush=True)
    total = planned_steps(resolved)

    def started() -> None:  # the lock is held: this launch is the run's next attempt, reaped if killed
        mark_attempt_files(paths, start, total, str(resolved.config_path or ""), jsonl="file" in c.LOGGER)
        start_reaper(paths.lock)

    return run(resolved, teardown=lambda: teardown(paths.project, (paths.exp, paths.val_exp),
                                                   k8s=c.BACKEND is Backend.K8S), started=started, total_steps=total)


def planned_steps(resolved: ResolvedConfig) -> int | None:
    """The step verl ends at: TOTAL_STEPS, else its dataloader's length (TRAIN_FILES' rows // TRAIN_BSZ,
    verl drops the last partial batch) times TOTAL_EPOCHS; None when the index cannot be read."""
    c = resolved.config
    if c.TOTAL_STEPS > 0:
        return c.TOTAL_STEPS
    from rlkit.validate.data import index_rows

    path = resolved.path("TRAIN_FILES")
    rows = index_rows(path) if path is not None else None
    return (rows // c.TRAIN_BSZ) * c.TOTAL_EPOCHS if rows and c.TRAIN_BSZ > 0 else None
