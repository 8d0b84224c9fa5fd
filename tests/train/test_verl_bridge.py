"""The verl bridge's pieces without Ray: TrialRecord -> verl sample, the server-manager upstream, the YAML."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord, longest_chain
from rlkit.train.verl_samples import group_uid, row_from_verl, sample_fields


def _segment(n_model: int, n_tool: int = 0, prompt: int = 3) -> TokenSegment:
    mask = [1] * n_model + [0] * n_tool
    return TokenSegment(prompt_ids=list(range(prompt)), response_ids=list(range(100, 100 + len(mask))),
                        response_mask=mask, response_logprobs=[-0.5 if m else 0.0 for m in mask], num_turns=2)


def _record(segments: list[TokenSegment], outcome: Outcome = Outcome.PASSED, reward: float = 1.0,
            masked: bool = False) -> TrialRecord:
    return TrialRecord(uid="u", task_id="t", session="s", outcome=outcome, reward=reward, masked=masked,
                       segments=segments, num_turns=sum(s.num_turns for s in segments),
                       num_breaks=max(0, len(segments) - 1))


def test_one_segment_is_the_sample_with_the_outcome_in_extra_fields() -> None:
    fields = sample_fields(_record([_segment(4, 2)]))
    assert fields["response_mask"] == [1, 1, 1, 1, 0, 0] and fields["reward_score"] == 1.0
    assert len(fields["response_logprobs"]) == len(fields["response_ids"]) == 6
    extra = fields["extra_fields"]
    assert extra["outcome"] == "passed" and extra["num_breaks"] == 0 and not extra["masked"]


def test_a_broken_trajectory_trains_on_its_longest_chain_and_counts_the_break() -> None:
    short, long_, last = _segment(2), _segment(5, 1), _segment(5)
    assert longest_chain([short, long_, last]) is last  # ties go to the later segment
    fields = sample_fields(_record([short, long_]))
    assert fields["response_mask"] == long_.response_mask
    assert fields["extra_fields"]["num_breaks"] == 1 and fields["extra_fields"]["dropped_model_tokens"] == 2


def test_a_masked_trial_adds_no_token_to_the_loss_but_keeps_a_score() -> None:
    fields = sample_fields(_record([_segment(3)], Outcome.SANDBOX_ERROR, 0.0, masked=True), pad_id=7)
    assert fields["response_mask"] == [0] and fields["response_ids"] == [7] and fields["reward_score"] == 0.0
    assert fields["extra_fields"]["masked"] and fields["extra_fields"]["outcome"] == "sandbox_error"
    empty = sample_fields(_record([], Outcome.AGENT_ERROR, 0.0))
    assert empty["response_mask"] == [0] and empty["extra_fields"]["masked"]


def test_a_truncated_trial_is_trained_with_its_reward_and_cut_to_the_response_length() -> None:
    fields = sample_fields(_record([_segment(6)], Outcome.CALL_LIMIT, 0.5), max_response=4)
    assert fields["reward_score"] == 0.5 and fields["extra_fields"]["truncated"]
    assert len(fields["response_ids"]) == 4 and fields["extra_fields"]["response_cut"] == 2


def test_the_index_row_comes_back_from_verl_row_fields() -> None:
    import numpy as np

    fields = {"task_id": np.str_("merge-intervals"), "task_source": "/tasks/merge-intervals", "image": "img:latest",
              "split": "train", "agent_name": "rlkit_agent", "data_source": "rlkit_tasks", "pass_rate": None,
              "raw_prompt": np.array([{"role": "user", "content": "Merge them."}], dtype=object),
              "extra_info": {"task_id": "merge-intervals", "index": 3, "split": "train"}}
    row = row_from_verl(fields)
    assert row.task_id == "merge-intervals" and row.instruction == "Merge them." and row.pass_rate is None
    assert group_uid(fields, row) == "3:merge-intervals"
    assert group_uid({**fields, "uid": "abc"}, row) == "abc"


def test_the_upstream_generates_on_the_worker_loop_sticky_per_session() -> None:
    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    from verl.workers.rollout.replica import TokenOutput

    calls = []

    class Manager:  # stands in for verl's LLMServerClient
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            calls.append((request_id, prompt_ids, dict(sampling_params), asyncio.get_running_loop()))
            return TokenOutput(token_ids=[5, 6], log_probs=[-0.1, -0.2], stop_reason="completed",
                               extra_fields={"global_steps": 7})

    worker_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=worker_loop.run_forever, daemon=True)
    thread.start()
    try:
        upstream = verl_loop.ServerManagerUpstream(Manager(), worker_loop)

        async def one() -> dict:
            token = verl_loop._session.set("trial-1")
            try:
                return await upstream.complete(None, [1, 2, 3], {"temperature": 1.0, "max_tokens": 9,
                                                                 "structured_outputs": {"regex": "x"}})
            finally:
                verl_loop._session.reset(token)

        out = asyncio.run(one())
    finally:
        worker_loop.call_soon_threadsafe(worker_loop.stop)
        thread.join(5)
    assert out == {"token_ids": [5, 6], "logprobs": [-0.1, -0.2], "finish_reason": "stop", "text": None}
    request_id, prompt, params, loop = calls[0]
    assert request_id == "trial-1" and prompt == [1, 2, 3] and loop is worker_loop
    assert params == {"temperature": 1.0, "max_tokens": 9, "logprobs": True}
    assert upstream.steps["trial-1"] == (7, 7) and upstream.latest_step == 7


def test_the_agent_loop_yaml_names_rlkits_loop_with_engine_settings(ws_config) -> None:
    from omegaconf import OmegaConf

    from rlkit.launch.plan import build_plan
    from rlkit.rollout.engine import EngineConfig

    plan = build_plan(ws_config)
    (path, text), = plan.files.items()
    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    assert f"{key}={path}" in plan.overrides
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    (entry,) = OmegaConf.load(path)
    assert entry.name == "rlkit_agent" and entry._target_ == "rlkit.train.verl_agent_loop.RlkitAgentLoop"
    engine = EngineConfig(**OmegaConf.to_container(entry.rlkit)["engine"], model_name="m", proxy_url="http://x")
    assert engine.scaffold == "terminus" and engine.max_response_tokens == 2048


def test_the_worker_host_serves_a_probed_proxy_on_loopback(tiny_model_dir: Path) -> None:
    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    from rlkit.proxy.health import read_health

    async def start():
        return verl_loop.WorkerHost({"proxy": {"host": "127.0.0.1", "max_model_len": 4096}, "engine": {}},
                                    str(tiny_model_dir), object(), asyncio.get_running_loop())

    host = asyncio.run(start())
    try:
        assert host.server.url.startswith("http://127.0.0.1:")
        status, health = read_health(host.server.url)
        assert status == 200 and health["model"] == tiny_model_dir.name
        engine = host.engine({"temperature": 1.0})
        assert engine.config.proxy_url == host.server.url and engine.config.model_name == tiny_model_dir.name
    finally:
        host.stop()
