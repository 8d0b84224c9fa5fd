"""`rlkit train` with TRAINER=verl: the launch plan executed (`rlkit.launch.cluster`), and this
run's sandboxes removed once Ray is stopped.

Before the launch, a resumed run (RESUME_MODE=auto, verl's latest checkpoint at step K) sets
aside the trial folders of steps after K (`step_<N>.interrupted-<time>`), as the local trainer
does: verl repeats those steps, and step_<N>/ then holds only the trials that step trained on.

Trials in flight when the run stops (Ctrl-C, SIGTERM, a failed step) leave their containers:
the agent-loop workers that would have removed them are gone with Ray. The teardown removes
the run's sandboxes (training and validation experiments) as the local trainer's does. After
a kill -9 nothing runs here: `rlkit cleanup CFG` removes what the dead run left.
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


def train_verl(resolved: ResolvedConfig) -> int:
    from rlkit.config.paths import RunPaths
    from rlkit.config.schema import Backend
    from rlkit.launch.cluster import run
    from rlkit.launch.plan import is_head_node
    from rlkit.train.local import latest_step, set_aside_steps_after

    c = resolved.config
    paths = RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME or "default",
                     c.EXP_NAME or "default")
    if c.RESUME_MODE.value == "auto" and is_head_node(c.RAY_HEAD_ADDRESS, node_ip=c.NODE_IP):
        start = latest_step(paths.checkpoints)
        for trials in (paths.trials, paths.val_trials):
            for moved in set_aside_steps_after(trials, start):
                print(f"set aside an interrupted step's trials: {moved}", flush=True)
    return run(resolved, teardown=lambda: remove_sandboxes(paths.project, (paths.exp, paths.val_exp),
                                                          k8s=c.BACKEND is Backend.K8S))
