"""DRY_RUN for TRAINER=local: the lines `rlkit train` prints instead of running the embedded trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlkit.train.ray_local import RAY_CPUS

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig


def dry_run_text(resolved: ResolvedConfig) -> str:
    """DRY_RUN for TRAINER=local: what this machine will run, from the objects the run uses."""
    from rlkit.config.secrets import mask_secrets
    from rlkit.launch.inference import Inference, InferenceConfig

    cfg = resolved.config
    paths = resolved.run_paths()
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
