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
    assert extra["outcome"] == "passed" and extra["num_breaks"] == 0


def test_a_broken_trajectory_trains_on_its_longest_chain_and_counts_the_break() -> None:
    short, long_, last = _segment(2), _segment(5, 1), _segment(5)
    assert longest_chain([short, long_, last]) is last  # ties go to the later segment
    fields = sample_fields(_record([short, long_]))
    assert fields["response_mask"] == long_.response_mask
    assert fields["extra_fields"]["num_breaks"] == 1 and fields["extra_fields"]["dropped_model_tokens"] == 2


def test_a_masked_trial_is_no_sample() -> None:
    assert sample_fields(_record([_segment(3)], Outcome.SANDBOX_ERROR, 0.0, masked=True)) is None
    assert sample_fields(_record([], Outcome.AGENT_ERROR, 0.0)) is None  # no model tokens: masked too
    assert sample_fields(_record([_segment(0, 4)], Outcome.FAILED_TESTS, 0.0)) is None


def _grouped_records() -> list[TrialRecord]:
    """[pass, pass, masked] and [pass, fail, masked]: one segment each, as verl trains them."""
    def trial(uid: str, n: int, outcome: Outcome, reward: float, masked: bool = False) -> TrialRecord:
        seg = _segment(3 + n, prompt=4 + n)
        return TrialRecord(uid=uid, task_id="t", session=f"{uid}-{n}", outcome=outcome, reward=reward,
                           masked=masked, segments=[seg], num_turns=2)

    return [trial("g1", 0, Outcome.PASSED, 1.0), trial("g1", 1, Outcome.PASSED, 1.0),
            trial("g1", 2, Outcome.SANDBOX_ERROR, 0.0, masked=True),
            trial("g2", 0, Outcome.PASSED, 1.0), trial("g2", 1, Outcome.FAILED_TESTS, 0.0),
            trial("g2", 2, Outcome.SANDBOX_ERROR, 0.0, masked=True)]


def _verl_v1_advantages(samples: list[tuple[str, int, dict]]) -> list[float]:
    """verl V1's advantage step (trainer_base._compute_advantage -> compute_advantage_for_multi_trajectories)
    on samples keyed `{uid}_{session}_0` as its agent-loop worker stores them; one value per sample."""
    import numpy as np
    import torch
    from verl.protocol import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    width = max(len(f["response_ids"]) for _, _, f in samples)
    mask = torch.zeros(len(samples), width)
    scores = torch.zeros(len(samples), width)
    for i, (_, _, fields) in enumerate(samples):
        n = len(fields["response_mask"])
        mask[i, :n] = torch.tensor(fields["response_mask"], dtype=torch.float32)
        scores[i, n - 1] = fields["reward_score"]  # AgentLoopOutput.as_dict: rm_scores[-1] = reward_score
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": scores},
                               non_tensors={"uid": np.array([uid for uid, _, _ in samples], dtype=object)})
    keys = [f"{uid}_{session}_0" for uid, session, _ in samples]
    out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator="grpo", num_repeat=3)
    trained = [out.batch["advantages"][i][mask[i] > 0] for i in range(len(samples))]
    return [float(a[0]) if len(a) else 0.0 for a in trained]


def test_masked_trials_carry_no_weight_and_advantages_equal_the_local_trainers() -> None:
    """Bug 1 of the cluster path: a masked trial sent to verl with a 0.0 score moved its group's
    mean, so [pass, pass, masked] trained both passes up. Now it is no sample, and verl's own V1
    advantage step gives what the local trainer gives on the same records."""
    from rlkit.train.algo import AlgoConfig, compute_advantages
    from rlkit.train.batch import build_batch

    records = _grouped_records()
    batch = build_batch(records, max_prompt=64, max_response=64, pad_id=0)
    local_adv, _ = compute_advantages(batch, AlgoConfig())
    local = [float(local_adv[b][batch.response_mask[b] > 0][0]) for b in range(batch.rows)]

    samples = [(r.uid, i % 3, f) for i, r in enumerate(records) if (f := sample_fields(r)) is not None]
    assert [(uid, session) for uid, session, _ in samples] == [("g1", 0), ("g1", 1), ("g2", 0), ("g2", 1)]
    verl = _verl_v1_advantages(samples)
    assert verl == pytest.approx(local, abs=1e-5)
    assert verl == pytest.approx([0.0, 0.0, 0.70710, -0.70710], abs=1e-4)

    # What the placeholder (score 0.0, mask 0) did: both passes of [pass, pass, masked] went up.
    placeholder = dict(samples[0][2], response_ids=[0], response_mask=[0], response_logprobs=[0.0],
                       reward_score=0.0)
    biased = _verl_v1_advantages([*samples[:2], ("g1", 2, placeholder)])
    assert biased[0] == pytest.approx(0.57735, abs=1e-4) and biased[1] == pytest.approx(0.57735, abs=1e-4)


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
    assert OmegaConf.to_container(entry.rlkit)["validation_seed"] == ws_config.config.SEED  # seeded validation


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
        assert engine.config.seed is None  # training samples draw freely
    finally:
        host.stop()


def test_trials_are_filed_under_the_step_verl_sampled_them_for() -> None:
    import numpy as np

    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    assert verl_loop.trial_step({"global_steps": np.int64(3)}, latest_weights=2) == 3  # V1 hands the step over
    assert verl_loop.trial_step({}, latest_weights=2) == 2  # else the newest weight version seen


def test_a_length_cut_reaches_the_proxy_as_a_length_stop() -> None:
    """verl's own vLLM server says "completed" for a length cut; an answer that used its whole max_tokens is
    "length" to the proxy. rlkit's vllm_http server keeps vLLM's "length" as verl's stop reason."""
    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    from rlkit.train.verl_cpu_rollout import stop_reason

    assert verl_loop.finish_reason("completed", 9, {"max_tokens": 9}) == "length"
    assert verl_loop.finish_reason("completed", 4, {"max_tokens": 9}) == "stop"
    assert verl_loop.finish_reason("length", 4, {"max_tokens": 9}) == "length"
    assert verl_loop.finish_reason("completed", 4, {}) == "stop"
    assert (stop_reason("length"), stop_reason("stop"), stop_reason("abort")) == ("length", "completed", "aborted")


def test_validation_samples_are_known_by_verls_flag_not_the_rows_split() -> None:
    """verl's V1 worker pops the batch's `validate` flag; it lives on in the `trajectory` argument of the
    worker's `_run_agent_loop`, which awaits the loop's `run()`. A row of the training split run for
    validation (VAL_FILES = TRAIN_FILES) is still a validation trial."""
    import inspect

    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    runner = AgentLoopWorker._run_agent_loop
    assert runner.__name__ == verl_loop.VERL_RUNNER and "trajectory" in inspect.signature(runner).parameters
    assert "await agent_loop.run(" in inspect.getsource(runner)

    class Loop:  # the part of RlkitAgentLoop.run that decides, called as verl calls it
        async def run(self) -> bool | None:
            trajectory = verl_loop.verl_trajectory()
            return None if trajectory is None else bool(trajectory["validate"])

    async def _run_agent_loop(sampling_params: dict, trajectory: dict) -> bool | None:
        return await Loop().run()

    assert asyncio.run(_run_agent_loop({}, {"validate": True, "step": 8})) is True
    assert asyncio.run(_run_agent_loop({}, {"validate": False, "step": 1})) is False
    assert asyncio.run(Loop().run()) is None  # outside verl's worker: the row's split decides


def test_a_verl_launch_marks_its_attempt_so_status_and_the_dashboard_know_its_steps(ws, monkeypatch) -> None:
    """Once the lock is held the launch writes the attempt marker (from step, total steps: verl's dataloader
    length when TOTAL_STEPS is 0) before verl's step lines; the dashboard then lists one run, finished at
    step 3 of 3. The launch itself (Ray, verl) is stood in for: it writes what verl's trainer would."""
    from rlkit.config.paths import RunPaths
    from rlkit.config.resolve import resolve
    from rlkit.launch import cluster
    from rlkit.monitor.dashboard import RunFolder, run_state
    from rlkit.train import verl_run

    seen: dict = {}

    def launch(resolved, teardown=None, started=None, total_steps=None) -> int:
        seen["total_steps"] = total_steps
        started()
        paths = RunPaths(ws.root / "out", "proj", "exp")
        with paths.console_log.open("a") as log:
            log.writelines(f"step:{s} - critic/score/mean:0.5\n" for s in (1, 2, 3))
        (paths.trials / "step_1").mkdir(parents=True)
        return 0

    monkeypatch.setattr(cluster, "run", launch)
    from rlkit.train import reaper

    monkeypatch.setattr(reaper, "start_reaper", lambda lock: seen.setdefault("reaper", lock))
    resolved = resolve(ws.config(TRAINER="verl", TOTAL_STEPS=0, TOTAL_EPOCHS=3, TRAIN_BSZ=2, LOGGER="console"),
                       ws.environ())
    assert verl_run.train_verl(resolved) == 0
    assert seen["total_steps"] == 3  # 2 rows // TRAIN_BSZ 2, times 3 epochs
    assert seen["reaper"] == RunPaths(ws.root / "out", "proj", "exp").lock  # a kill -9 of the launcher is reaped
    paths = RunPaths(ws.root / "out", "proj", "exp")
    first = paths.console_log.read_text().splitlines()[0]
    assert first.startswith("[rlkit] attempt ") and '"total_steps": 3' in first and '"from_step": 0' in first
    assert not paths.jsonl.exists()  # LOGGER without file: verl writes no JSONL, nor does rlkit
    assert run_state(paths) == {"state": "finished", "step": 3, "total_steps": 3}
    assert [(r["exp"], r["project"], r["state"]) for r in RunFolder(ws.root / "out").runs()] == [
        ("exp", "proj", "finished")]


def test_verl_validation_attempts_are_seeded_as_the_local_trainers_so_before_and_after_pair(
        tiny_model_dir: Path, monkeypatch) -> None:
    """verl's V1 worker starts a validation prompt's `val_kwargs.n` samples as `session_id=0..n-1`: that number is
    the attempt, seeded from (SEED, task, attempt) as the local trainer's validation, so a policy's two
    validations draw alike. Training samples carry no attempt (they sample freely)."""
    import inspect

    verl_loop = pytest.importorskip("rlkit.train.verl_agent_loop")
    from verl.trainer.ppo.v1 import agent_loop_tq

    assert "session_id=i" in inspect.getsource(agent_loop_tq.AgentLoopWorkerTQ._run_prompt)
    assert verl_loop.validation_attempt({"session_id": 3}, {"rollout_n": 0, "validate": True}) == 3
    import numpy as np
    assert verl_loop.validation_attempt({}, {"rollout_n": np.int64(2), "validate": True}) == 2  # legacy worker
    assert verl_loop.validation_attempt({}, None) is None

    calls: list[tuple[bool, int | None]] = []

    class Engine:  # stands in for the rollout engine: the sandbox and the agent are not the point
        def __init__(self, validation: bool) -> None:
            self.validation = validation
            self.config = type("C", (), {"step_dir": staticmethod(lambda step: Path("/nonexistent"))})()

        async def run_trial(self, row, *, uid, step, attempt=None):
            calls.append((self.validation, attempt))
            return TrialRecord(uid=uid, task_id=row.task_id, session="s", outcome=Outcome.PASSED, reward=1.0,
                               masked=False)

    class Host:
        upstream = type("U", (), {"latest_step": 0, "steps": {}})()

        def engine(self, sampling, *, validation=False):
            return Engine(validation)

    monkeypatch.setattr(verl_loop.WorkerHost, "get", classmethod(lambda cls, *a: Host()))
    monkeypatch.setattr(verl_loop, "file_trial", lambda *a: None)
    loop = object.__new__(verl_loop.RlkitAgentLoop)
    loop.settings, loop.model_path, loop.server_manager = {}, str(tiny_model_dir), object()
    loop.output = lambda record, steps=None: record
    fields = {"task_id": "merge-intervals", "task_source": "/tasks/merge-intervals", "image": "img:latest",
              "split": "train", "raw_prompt": [{"role": "user", "content": "Merge them."}],
              "extra_info": {"task_id": "merge-intervals", "index": 0, "split": "train"}}  # VAL_FILES = TRAIN_FILES

    async def _run_agent_loop(sampling_params: dict, trajectory: dict, **kwargs):  # verl's worker, as it calls run()
        return await loop.run(sampling_params, **kwargs)

    for i in range(3):
        asyncio.run(_run_agent_loop({}, {"validate": True, "rollout_n": 0, "step": 0}, session_id=i, **fields))
    asyncio.run(_run_agent_loop({}, {"validate": False, "rollout_n": 0, "step": 1}, session_id=2, **fields))
    assert calls == [(True, 0), (True, 1), (True, 2), (False, None)]
    settings = {"proxy": {"host": "127.0.0.1", "max_model_len": 4096}, "engine": {}, "validation_seed": 5}

    async def start():
        return verl_loop.WorkerHost(settings, str(tiny_model_dir), object(), asyncio.get_running_loop())

    host = asyncio.run(start())
    try:
        assert host.engine({"temperature": 1.0}, validation=True).config.seed == 5
        assert host.engine({"temperature": 1.0}).config.seed is None
    finally:
        host.stop()
