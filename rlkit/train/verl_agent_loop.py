"""verl's agent loop for rlkit: each verl sample is one rlkit trial (sandbox, scaffold, tests).

verl 0.9.1 instantiates `RlkitAgentLoop` by the name an index row carries in `agent_name`
(`rlkit_agent`), from the `agent_loop_config_path` YAML the launch plan writes and passes
(`rlkit.launch.verl_overrides.agent_loop_yaml`). `run()` runs ONE trial through
`RolloutEngine.run_trial` and returns `AgentLoopOutput` (`rlkit.train.verl_samples` maps
the TrialRecord: longest chain, masking, reward, outcome in `extra_fields`).

**Where the tokens come from: verl's server manager, not the replicas' HTTP addresses.**
Each agent-loop worker process (a Ray actor) hosts one rlkit proxy on its own thread and
event loop. The proxy renders chats and parses tool calls as always, but its upstream is
`ServerManagerUpstream`: every completion is `server_manager.generate(session, prompt_ids=...)`
on the worker's loop. That keeps, unchanged:
  * verl's load balancing: the one global load-balancer actor shared by all workers, sticky
    per request id (we pass the proxy session, so a trial stays on one replica's prefix
    cache) and least-loaded across replicas. A proxy routing to HTTP addresses itself would
    balance only its own worker's share and race verl's balancer.
  * sleep/wake and weight sync: verl wakes the replicas, runs the agent loops, then syncs
    weights and sleeps them; in separate_async its client aborts, waits out a weight sync
    and resumes in-flight requests. Calls that go through the manager take part in that
    protocol; raw HTTP calls would hit sleeping or mid-sync engines.
  * staleness: replicas tag outputs with `global_steps`; min/max per trial go back in
    `extra_fields` (`min_global_steps` / `max_global_steps`), as V1's off-policy sampler reads.
The replicas' HTTP addresses remain the route for the local trainer and the benchmarks.

Trials land in `harbor_trials/<project>/<exp>/step_<N>/`, N being the training step verl sampled
the prompt for (validation samples, known by verl's `validate` flag: `<exp>_val/step_<N>/`), as the
local trainer files them.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from rlkit.errors import UpstreamError
from rlkit.proxy.core import ProxyConfig, ProxyCore
from rlkit.proxy.health import probe_proxy
from rlkit.proxy.server import ProxyEventLoop, ProxyServer
from rlkit.proxy.upstream import UpstreamClient
from rlkit.rollout.records import TrialRecord
from rlkit.train.verl_samples import group_uid, row_from_verl, sample_fields

log = logging.getLogger(__name__)

PSEUDO_UPSTREAM = "verl://server-manager"
# vLLM SamplingParams keys the proxy may send that verl's vLLM server passes straight through.
_SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "min_p", "max_tokens", "repetition_penalty",
                            "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "seed",
                            "ignore_eos", "min_tokens"})
_session: contextvars.ContextVar[str] = contextvars.ContextVar("rlkit_proxy_session", default="")


class ServerManagerUpstream(UpstreamClient):
    """The proxy's upstream client over verl's `LLMServerClient`: token ids in, token ids +
    logprobs out. Its one pseudo-replica stands for all of verl's replicas."""

    def __init__(self, server_manager: Any, worker_loop: asyncio.AbstractEventLoop,
                 max_model_len: int | None = None, model_name: str = "policy") -> None:
        super().__init__(model_name)
        self.server_manager = server_manager
        self.worker_loop = worker_loop
        self._max_model_len = max_model_len
        self.steps: dict[str, tuple[int, int]] = {}  # session -> (min, max) global_steps seen
        self.latest_step = 0

    async def max_model_len(self, replica: Any) -> int | None:
        return self._max_model_len

    async def describe(self, replica: Any, timeout_s: float = 2.0) -> dict[str, Any]:
        # verl owns the replicas' lives (sleep/wake, weight sync); its manager answers for them.
        replica.max_model_len, replica.models, replica.stale = self._max_model_len, (self.model_name,), False
        return {"url": PSEUDO_UPSTREAM, "up": True, "models": [self.model_name], "serves_model": True,
                "max_model_len": self._max_model_len, "error": None}

    async def healthy(self, replica: Any, timeout_s: float = 2.0) -> bool:
        return True

    async def close(self) -> None:
        return None

    async def complete(self, replica: Any, prompt_ids: list[int], sampling: dict[str, Any]) -> dict[str, Any]:
        session = _session.get() or uuid.uuid4().hex
        params = {k: v for k, v in sampling.items() if k in _SAMPLING_KEYS}
        params["logprobs"] = True
        call = self.server_manager.generate(session, prompt_ids=list(prompt_ids), sampling_params=params)
        try:  # the manager's Ray calls belong to the worker's loop, not the proxy's
            out = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self.worker_loop))
        except Exception as exc:  # any failure of verl's server is an upstream error
            raise UpstreamError(f"verl server manager failed: {type(exc).__name__}: {exc}",
                                upstream=PSEUDO_UPSTREAM) from exc
        if out.stop_reason == "aborted":
            raise UpstreamError("verl aborted the request (weight sync)", upstream=PSEUDO_UPSTREAM)
        version = out.extra_fields.get("global_steps")
        if isinstance(version, int):
            low, high = self.steps.get(session, (version, version))
            self.steps[session] = (min(low, version), max(high, version))
            self.latest_step = max(self.latest_step, version)
        logprobs = list(out.log_probs or [])
        return {"token_ids": list(out.token_ids), "logprobs": [float(x) for x in logprobs],
                "finish_reason": finish_reason(out.stop_reason, len(out.token_ids), params), "text": None}


def finish_reason(stop_reason: str | None, sampled: int, params: dict[str, Any]) -> str:
    """"length" when the answer was cut at max_tokens, else "stop". verl's own vLLM server reports a length
    cut as "completed", so an answer that used its whole max_tokens counts as cut (one that ended on its
    end-of-sequence token exactly at the limit reads as cut too: the rarer error)."""
    if stop_reason == "length":
        return "length"
    limit = params.get("max_tokens")
    return "length" if isinstance(limit, int) and limit > 0 and sampled >= limit else "stop"


def quiet_trial_libraries() -> None:
    """harbor logs at DEBUG (and, every terminus trial, an ERROR that it has no web tools to disable),
    LiteLLM at DEBUG; in verl's worker the root logger passes them all into logs/<exp>.log."""
    logging.getLogger("harbor").setLevel(logging.WARNING)
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)

    class NoWebTools(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "exposes no native web search" not in record.getMessage()

    for handler in logging.getLogger().handlers:
        handler.addFilter(NoWebTools())


class WorkerHost:
    """One proxy (own thread + ProxyEventLoop) and its engines, per agent-loop worker process."""

    _lock = threading.Lock()
    _current: WorkerHost | None = None

    def __init__(self, settings: dict[str, Any], model_path: str, server_manager: Any,
                 worker_loop: asyncio.AbstractEventLoop) -> None:
        quiet_trial_libraries()

        proxy = dict(settings.get("proxy") or {})
        host = proxy.pop("host", "127.0.0.1")
        if host == "node":  # the address pods reach: this Ray node's
            import ray

            host = ray.util.get_node_ip_address()
        # Agents name the policy by a plain name (litellm's hosted_vllm/<name> takes no path).
        proxy.setdefault("served_model_name", Path(model_path.rstrip("/")).name or "policy")
        config = ProxyConfig(model_path=model_path, upstreams=[PSEUDO_UPSTREAM], host=host, port=0, **proxy)
        self.model_name = config.served_model_name or model_path
        self.upstream = ServerManagerUpstream(server_manager, worker_loop, proxy.get("max_model_len"),
                                              self.model_name)
        self.engine_settings = dict(settings.get("engine") or {})
        self.validation_seed: int | None = settings.get("validation_seed")
        self._engines: dict[tuple, Any] = {}
        self._loop = ProxyEventLoop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlkit-proxy", daemon=True)
        self._thread.start()
        core = SessionTaggedCore(config, client=self.upstream)
        self.server = ProxyServer(config, core=core)
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(600)
        # The launch probe: this process's proxy, serving this model (never a stale one on the port).
        probe_proxy(self.server.url, self.model_name, pid=os.getpid(), wait_s=30.0)
        log.info("rlkit proxy for verl's agent loop on %s", self.server.url)

    @classmethod
    def get(cls, settings: dict[str, Any], model_path: str, server_manager: Any) -> WorkerHost:
        with cls._lock:
            if cls._current is None:
                cls._current = cls(settings, model_path, server_manager, asyncio.get_running_loop())
            return cls._current

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def engine(self, sampling: dict[str, Any], *, validation: bool = False) -> Any:
        """The engine whose sessions sample with verl's params; validation trials run under
        `<experiment>_val` (their sandboxes and folders), as the local trainer's do."""
        from rlkit.rollout.engine import EngineConfig, RolloutEngine

        key = (validation, *sorted(sampling.items()))
        if key not in self._engines:
            settings = dict(self.engine_settings)
            if validation:
                settings["experiment"] = f"{settings.get('experiment', 'default')}_val"
                settings["seed"] = self.validation_seed  # seeded attempts: paired validations (SEED)
            config = EngineConfig(**{**settings, "model_name": self.model_name, "proxy_url": self.server.url,
                                     "sampling": dict(sampling)})
            self._engines[key] = RolloutEngine(config)
        return self._engines[key]


class SessionTaggedCore(ProxyCore):
    """Names the session of each completion for the upstream (verl's sticky request id)."""

    async def _complete(self, session_id: str, prompt_ids: list[int], params: dict[str, Any]) -> Any:
        token = _session.set(session_id)
        try:
            return await super()._complete(session_id, prompt_ids, params)
        finally:
            _session.reset(token)


VALIDATION_SPLITS = frozenset({"val", "test"})  # an index row's split (rlkit index build --val-fraction)
VERL_RUNNER = "_run_agent_loop"  # verl's AgentLoopWorker method that awaits `AgentLoopBase.run`


def verl_trajectory() -> dict[str, Any] | None:
    """verl's `trajectory` for this sample (step, sample_index, rollout_n, validate); None outside verl's worker.

    verl 0.9.1's V1 worker pops the batch's `validate` flag before the samples' fields reach the loop
    (trainer/ppo/v1/agent_loop_tq.py), and a run whose VAL_FILES is its TRAIN_FILES (the embedded
    example) has training rows in its validation set, so neither the fields nor the row's split tell.
    The flag lives on in the `trajectory` argument of the worker's `_run_agent_loop`, the coroutine that
    awaits `run()`: its frame is on this call's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == VERL_RUNNER:
            trajectory = frame.f_locals.get("trajectory")
            if isinstance(trajectory, dict) and "validate" in trajectory:
                return trajectory
        frame = frame.f_back
    return None


def validation_attempt(fields: dict[str, Any], trajectory: dict[str, Any] | None) -> int | None:
    """The sample's attempt number among its prompt's `val_kwargs.n` validation samples: verl's V1 worker
    starts attempt i as `session_id=i`; the legacy worker repeats the row and counts `rollout_n`. With
    SEED, it seeds the attempt's sampling as the local trainer's validation does, so two validations of
    one policy draw alike and a run's before and after pair attempt by attempt."""
    for value in (fields.get("session_id"), (trajectory or {}).get("rollout_n")):
        try:
            return int(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError):
            continue
    return None


def file_trial(step_dir: Path, step: int, record: TrialRecord, started: float) -> None:
    """The trial in its step's summary.json (status and the dashboard read it); a failure to write it
    is logged, never the trial's."""
    from rlkit.rollout.step_file import add_trial

    try:
        add_trial(step_dir, step, record, started, time.time())
    except (OSError, ValueError) as exc:
        log.warning("could not add trial %s to %s/summary.json: %s", record.session, step_dir, exc)


def trial_step(fields: dict[str, Any], latest_weights: int) -> int:
    """The step a trial's folder is named for: the training step verl sampled its prompt for
    (V1 hands `global_steps` to every sample: trials of step N land in step_<N>/, as the local
    trainer's do), else the newest weight version the replicas reported."""
    value = fields.get("global_steps")
    try:
        return int(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return latest_weights


def proxy_sampling(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """verl's per-sample sampling params as proxy session overrides (vLLM's names)."""
    out = {k: sampling_params[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty")
           if sampling_params.get(k) is not None}
    if out.get("top_k") == -1:
        out.pop("top_k")  # vLLM's "no top-k"; the proxy need not send it
    return out


class RlkitAgentLoop(AgentLoopBase):
    """One trial per sample; see the module docstring."""

    def __init__(self, *args: Any, rlkit: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from omegaconf import OmegaConf

        settings = OmegaConf.to_container(rlkit, resolve=True) if rlkit is not None and not isinstance(
            rlkit, dict) else (rlkit or {})
        self.settings: dict[str, Any] = dict(settings)  # type: ignore[arg-type]
        self.model_path = str(self.config.actor_rollout_ref.model.path)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        trajectory = verl_trajectory()  # first: before any await
        host = WorkerHost.get(self.settings, self.model_path, self.server_manager)
        row = row_from_verl(kwargs)
        uid = group_uid(kwargs, row)
        validation = row.split in VALIDATION_SPLITS if trajectory is None else bool(trajectory["validate"])
        engine = host.engine(proxy_sampling(sampling_params), validation=validation)
        step = trial_step(kwargs, host.upstream.latest_step)
        started = time.time()
        attempt = validation_attempt(kwargs, trajectory) if validation else None
        record: TrialRecord = await engine.run_trial(row, uid=uid, step=step, attempt=attempt)
        await asyncio.to_thread(file_trial, engine.config.step_dir(step), step, record, started)
        return self.output(record, host.upstream.steps.pop(record.session, None))

    def output(self, record: TrialRecord, steps: tuple[int, int] | None = None) -> AgentLoopOutput | list:
        """The trial as verl's output; a masked trial as no output at all (`[]`: verl's V1 worker
        stores nothing, so it counts in no group's statistics and no loss; rlkit.train.verl_samples)."""
        fields = sample_fields(record, max_response=self.rollout_config.response_length)
        if fields is None:
            log.warning("trial %s (%s, %s) is masked: left out of its group and the loss", record.session,
                        record.task_id, record.outcome.value)
            return []
        prompt = fields["prompt_ids"]
        capped = self._cap_text_prompt_length(prompt)
        fields["extra_fields"]["prompt_cut"] = len(prompt) - len(capped)
        fields["prompt_ids"] = capped
        if steps is not None:
            fields["extra_fields"]["min_global_steps"], fields["extra_fields"]["max_global_steps"] = steps
        model_s = float(record.timings.get("model", 0.0))
        metrics = AgentLoopMetrics(generate_sequences=model_s,
                                   tool_calls=max(0.0, float(record.timings.get("agent", 0.0)) - model_s),
                                   compute_score=float(record.timings.get("verifier", 0.0)))
        return AgentLoopOutput(metrics=metrics, **fields)
