"""The rollout engine: a step's trials, run concurrently, each reduced to one TrialRecord.

A training step, a rollout-generation pass and an evaluation are the same work: N
trials per index row of a model through a scaffold, the proxy and vLLM, in sandboxes,
graded by the tasks' tests. Per trial the engine sets the proxy session's budgets
(`POST /s/<sid>/limits`, so the proxy may live in this process or another), runs the
trial (`rlkit.rollout.trial`), retries infrastructure failures the errors mark
retryable, then closes the session and takes its token segments and latencies from the
proxy's final record. A trial never raises: every failure is an outcome, and a step
always completes and writes `step_<N>/summary.json`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlkit import errors
from rlkit.errors import UserError
from rlkit.rollout.records import Outcome, StepResult, TokenSegment, TrialRecord
from rlkit.rollout.summary import classify, summarize, write_summary

if TYPE_CHECKING:
    from rlkit.config.schema import RunConfig
    from rlkit.rollout.trial import TrialOutcome
    from rlkit.tasks.index import IndexRow

_log = logging.getLogger(__name__)
TRIALS_DIR = "harbor_trials"
RETRY_BACKOFF_S = 2.0
DEFAULT_MAX_CALLS = 100


class EngineConfig(BaseModel):
    """What the engine runs: which agent, where, how many at once, under which budgets."""

    model_config = ConfigDict(extra="forbid")

    scaffold: str = Field(default="terminus", description="scaffold name (agent='model' only)")
    backend: str = Field(default="docker", description="sandbox backend: docker | k8s")
    agent_delivery: str = Field(default="auto", description="an in-container agent mounted (auto, mount) or "
                                "baked into each task image (bake): AGENT_DELIVERY")
    agent: Literal["model", "oracle", "nop"] = Field(
        default="model", description="model: the policy through scaffold + proxy; oracle/nop: harbor's references")
    n_resp: int = Field(default=1, ge=1, description="trials per index row (N_RESP)")
    max_sandboxes: int = Field(default=4, ge=1, description="trials at once (MAX_SANDBOXES)")
    project: str = "default"
    experiment: str = "default"
    trials_root: Path = Field(default=Path(TRIALS_DIR), description="OUTPUT_DIR/harbor_trials")
    model_name: str | None = Field(default=None, description="served model name the proxy knows the policy by")
    proxy_url: str | None = Field(default=None, description="proxy address as the agent reaches it")
    agent_timeout_sec: float | None = Field(default=None, gt=0, description="per-trial agent timeout override")
    verifier_timeout_sec: float | None = Field(default=None, gt=0, description="per-trial verifier timeout override")
    max_calls_per_session: int = Field(default=DEFAULT_MAX_CALLS, ge=1, description="model calls per trial")
    max_response_tokens: int = Field(default=170000, ge=1, description="response tokens per trial (MAX_RESP)")
    max_attempts: int = Field(default=3, ge=1, description="1 + infrastructure retries per trial")
    temperature: float | None = Field(default=None, ge=0)
    max_turns: int | None = Field(default=None, ge=1)
    sampling: dict[str, Any] = Field(default_factory=dict,
                                     description="sampling overrides forced on every session (POST /s/<sid>/sampling)")
    seed: int | None = Field(default=None, description="seed passes: each attempt's sampling is seeded from "
                             "(seed, task, attempt), so one policy gives the same draws in every pass (SEED)")
    tamper_policy: Literal["zero", "mask"] = Field(
        default="zero", description="a tamper_suspect trial (reward 0) is trained on (zero) or masked (TAMPER_POLICY)")
    broken_protocol_reward: Literal["zero", "tests"] = Field(
        default="zero", description="a parse_error / agent_error trial earns 0 (zero) or its tests' reward (tests) "
                                    "(BROKEN_PROTOCOL_REWARD)")
    use_index_image: bool = Field(default=True, description="run the index row's image (no builds during a step)")
    environment_kwargs: dict[str, Any] = Field(default_factory=dict, description="extra sandbox backend options")

    @classmethod
    def from_run_config(cls, cfg: RunConfig, *, model_name: str | None, proxy_url: str | None,
                        **overrides: Any) -> EngineConfig:
        """The engine of a run: names, scaffold, backend, N_RESP, MAX_SANDBOXES and MAX_RESP from the config."""
        output = Path(cfg.OUTPUT_DIR).expanduser()
        values: dict[str, Any] = {
            "scaffold": str(cfg.SCAFFOLD), "backend": str(cfg.BACKEND), "n_resp": cfg.N_RESP,
            "agent_delivery": str(cfg.AGENT_DELIVERY),
            "max_sandboxes": cfg.MAX_SANDBOXES, "project": cfg.PROJECT_NAME or "default",
            "experiment": cfg.EXP_NAME or "default", "trials_root": output / TRIALS_DIR,
            "model_name": model_name, "proxy_url": proxy_url, "max_response_tokens": cfg.MAX_RESP,
            "tamper_policy": str(cfg.TAMPER_POLICY), "broken_protocol_reward": str(cfg.BROKEN_PROTOCOL_REWARD),
        }
        return cls(**{**values, **overrides})

    def step_dir(self, step: int) -> Path:
        return self.trials_root / self.project / self.experiment / f"step_{step}"


def preload(scaffold: str, backend: str) -> float:
    """`rlkit.rollout.trial.preload` for the policy's trials: the scaffold's agent and sandbox classes."""
    from rlkit.rollout.trial import preload as preload_trial
    from rlkit.scaffolds import get_scaffold

    found = get_scaffold(scaffold)
    return preload_trial(found.agent_import_path, found.environment_import_path(backend))


class RolloutEngine:
    """Runs trials of index rows; see the module docstring."""

    def __init__(self, config: EngineConfig) -> None:
        if config.agent == "model" and not (config.model_name and config.proxy_url):
            raise UserError("the model agent needs the served model name and the proxy URL", key="proxy_url",
                            fix="bring up inference first (rlkit.launch.inference) and pass its proxy_url/model_name")
        self.config = config
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def _gate(self) -> asyncio.Semaphore:
        """MAX_SANDBOXES per event loop (verl's agent-loop workers each run their own)."""
        loop = asyncio.get_running_loop()
        if loop not in self._gates:
            self._gates[loop] = asyncio.Semaphore(self.config.max_sandboxes)
        return self._gates[loop]

    async def run_step(self, step: int, rows: Sequence[IndexRow], *, n_resp: int | None = None,
                       on_trial: Callable[[TrialRecord], None] | None = None) -> StepResult:
        """`n_resp` trials of every row (uid per row position), at most MAX_SANDBOXES at once.

        Writes `step_<N>/summary.json`; `on_trial` sees each record as it finishes."""
        n = n_resp or self.config.n_resp
        started = time.monotonic()

        async def one(position: int, row: IndexRow) -> TrialRecord:
            record = await self.run_trial(row, uid=f"{step}:{position}:{row.task_id}", step=step)
            if on_trial is not None:
                on_trial(record)
            return record

        records = list(await asyncio.gather(*(one(pos, row) for pos, row in enumerate(rows) for _ in range(n))))
        summary = summarize(step, records, time.monotonic() - started)
        step_dir = self.config.step_dir(step)
        write_summary(step_dir, summary)
        return StepResult(step=step, records=records, summary=summary, step_dir=step_dir)

    async def run_trial(self, row: IndexRow, *, uid: str, step: int, attempt: int | None = None) -> TrialRecord:
        """One trial of `row`, retried on retryable infrastructure failures; never raises.

        `attempt` (the row's attempt number in a pass) seeds its sampling when the engine has a `seed`."""
        sample_seed = None if self.config.seed is None or attempt is None else \
            attempt_seed(self.config.seed, row.task_id, attempt)
        base = f"{_short(row.task_id)}__{uuid.uuid4().hex[:8]}"
        session = base
        outcome = None
        try:
            for tries in range(1, self.config.max_attempts + 1):
                session = base if tries == 1 else f"{base}-r{tries}"
                async with self._gate():
                    outcome, record = await self._attempt(row, session, step, sample_seed)
                if not (outcome.reason is Outcome.SANDBOX_ERROR and retryable(outcome.exception_type)):
                    break
                if tries < self.config.max_attempts:
                    _log.warning("trial %s: %s (%s), retrying", session, outcome.reason, outcome.exception_type)
                    await asyncio.sleep(RETRY_BACKOFF_S * tries)
            return self._record(row, uid, outcome, record, tries, attempt if sample_seed is not None else None)
        except Exception as exc:  # noqa: BLE001 — one trial never sinks a step
            _log.exception("trial %s failed inside rlkit", session)
            return TrialRecord(uid=uid, task_id=row.task_id, session=session, outcome=Outcome.ERROR, reward=0.0,
                               masked=True, detail=f"{type(exc).__name__}: {exc}"[:2000])

    async def _attempt(self, row: IndexRow, session: str, step: int,
                       sample_seed: int | None = None) -> tuple[TrialOutcome, dict[str, Any] | None]:
        from rlkit.rollout.trial import run_trial

        model = self.config.agent == "model"
        if model:
            await self._proxy_post(session, "limits", {"max_calls": self.config.max_calls_per_session,
                                                       "max_response_tokens": self.config.max_response_tokens})
            sampling = {**self.config.sampling, **({"seed": sample_seed} if sample_seed is not None else {})}
            if sampling:
                await self._proxy_post(session, "sampling", sampling)
        try:
            outcome = await run_trial(self.trial_spec(row, session, step))
        finally:
            record = await self._proxy_post(session, "close", None, query="?calls=delta") if model else None
        return outcome, record

    def trial_spec(self, row: IndexRow, session: str, step: int) -> Any:
        """The `TrialSpec` of one attempt: the scaffold's agent and sandbox, or oracle / nop."""
        from rlkit.rollout.trial import TrialSpec

        cfg = self.config
        if row.is_git:
            raise UserError(f"task {row.task_id}: git task sources are not fetched yet", key="task_source",
                            fix="check the task out locally and index that directory")
        if cfg.agent == "model":
            from rlkit.scaffolds import ScaffoldRun, get_scaffold

            run = ScaffoldRun(session=session, model=str(cfg.model_name), proxy_url=str(cfg.proxy_url),
                              max_turns=cfg.max_turns, temperature=cfg.temperature)
            fields = get_scaffold(cfg.scaffold).trial_fields(run, cfg.backend, cfg.agent_delivery)
        else:
            fields = {"agent": cfg.agent, "backend": cfg.backend, "environment_kwargs": {}}
        env = {**fields["environment_kwargs"], **cfg.environment_kwargs}
        if cfg.use_index_image:
            env.setdefault("image", with_tag(row.image, env.get("image_variant", "latest")))
        return TrialSpec(task_dir=Path(row.task_source), trials_root=cfg.trials_root, project=cfg.project,
                         experiment=cfg.experiment, step=step, session=session, agent=fields["agent"],
                         backend=fields["backend"], environment_kwargs=env,
                         agent_timeout_sec=cfg.agent_timeout_sec or row.agent_timeout_sec,
                         verifier_timeout_sec=cfg.verifier_timeout_sec or row.verifier_timeout_sec)

    async def _proxy_post(self, session: str, what: str, body: dict[str, Any] | None,
                          query: str = "") -> dict[str, Any] | None:
        """POST /s/<sid>/<what>; a proxy that does not answer costs the record, not the trial."""
        import httpx

        from rlkit.scaffolds.tls import tls_context

        url = f"{str(self.config.proxy_url).rstrip('/')}/s/{session}/{what}{query}"
        try:
            async with httpx.AsyncClient(timeout=60.0, trust_env=False, verify=tls_context()) as client:
                response = await client.post(url, json=body if body is not None else {})
        except httpx.HTTPError as exc:
            _log.warning("proxy %s: %s", url, exc)
            return None
        if response.status_code != 200:
            if what != "close":  # a session the agent never called has no record
                _log.warning("proxy %s answered %s: %s", url, response.status_code, response.text[:200])
            return None
        body_out = response.json()
        return body_out if isinstance(body_out, dict) else None

    def _record(self, row: IndexRow, uid: str, outcome: TrialOutcome, record: dict[str, Any] | None,
                attempts: int, attempt: int | None = None) -> TrialRecord:
        segments = [TokenSegment.from_proxy(s) for s in (record or {}).get("segments") or []]
        final = classify(outcome.reason, outcome.reward, record)
        tokens = any(any(s.response_mask) for s in segments)
        tamper_masked = final is Outcome.TAMPER_SUSPECT and self.config.tamper_policy == "mask"
        detail = f"{outcome.exception_type}: {outcome.exception_message or ''}"[:2000] if outcome.exception_type \
            else None
        zeroed = final.masked or final is Outcome.TAMPER_SUSPECT or (
            final.broke_protocol and self.config.broken_protocol_reward == "zero")
        return TrialRecord(
            uid=uid, task_id=row.task_id, session=outcome.session, outcome=final,
            reward=0.0 if zeroed else outcome.reward, masked=final.masked or not tokens or tamper_masked,
            segments=segments, num_turns=sum(s.num_turns for s in segments),
            num_breaks=int((record or {}).get("num_breaks") or 0),
            parse_failures=int((record or {}).get("parse_failures") or 0),
            timings=trial_timings(outcome.timings, record), attempts=attempts, attempt=attempt,
            trial_dir=outcome.trial_dir, detail=detail)


def trial_timings(harbor: dict[str, float], record: dict[str, Any] | None) -> dict[str, float]:
    """Where a trial's time went, as a partition: sandbox (start), agent (the scaffold's own
    time: setup, tool runs, waits), model (the proxy calls' latency, taken out of the
    agent's time so the four add up), verifier; plus total (wall, teardown included)."""
    calls = (record or {}).get("calls") or []
    model = round(sum(float(c.get("latency_s") or 0.0) for c in calls), 6)
    agent = harbor.get("agent_setup", 0.0) + harbor.get("agent_execution", 0.0)
    return {
        "sandbox": harbor.get("environment_setup", 0.0),
        "agent": round(max(0.0, agent - model), 6),
        "verifier": harbor.get("verifier", 0.0),
        "model": model,
        "total": harbor.get("total", 0.0),
    }


def attempt_seed(seed: int, task_id: str, attempt: int) -> int:
    """A 31-bit sampling seed for one attempt of one task in a seeded pass."""
    import hashlib

    digest = hashlib.sha256(f"rlkit-attempt:{seed}:{task_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def retryable(exc_type: str | None) -> bool:
    """Is a sandbox failure worth another attempt? rlkit's errors say so themselves
    (`retryable`); harbor's own sandbox failures (start timeouts, health checks) are transient."""
    cls = getattr(errors, exc_type or "", None)
    if isinstance(cls, type) and issubclass(cls, errors.RlkitError):
        return cls.retryable
    return True


def with_tag(image: str, tag: str) -> str:
    """`image` with its tag replaced (a scaffold's baked variant of a task image)."""
    name, sep, old = image.rpartition(":")
    if not sep or "/" in old:  # no tag (the colon was a registry port)
        return f"{image}:{tag}"
    return f"{name}:{tag}"


def _short(task_id: str) -> str:
    return task_id.split("/")[-1][:40]
