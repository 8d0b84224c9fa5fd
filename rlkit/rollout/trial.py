"""Run trials: one task, one agent, one sandbox, graded by the task's own tests.

Each trial is a harbor `Trial` (start sandbox → agent → verifier → stop and remove) on an
rlkit sandbox backend, written in harbor's directory layout under
`<trials_root>/<project>/<experiment>/step_<N>/<session>/`. rlkit adds what a training
step needs on top: a typed outcome with one reward and one reason per trial (never an
exception for a failed trial), a verifier that cannot be fooled by the agent's leftovers
(`_verifier.GuardedVerifier`), a sandbox that is removed whatever happens, and
`run_trials` for many trials at once where one failure never sinks the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlkit.errors import UserError
from rlkit.rollout.records import Outcome

# What a trial alone can tell (the engine adds the proxy's: parse_error and the truncations).
Reason = Outcome
AGENT_ALIASES: dict[str, str] = {"oracle": "oracle", "nop": "nop", "noop": "nop"}
VERIFIER_IMPORT_PATH = "rlkit.rollout._verifier:GuardedVerifier"
_log = logging.getLogger(__name__)
TIMING_BLOCKS = ("environment_setup", "agent_setup", "agent_execution", "verifier")

# harbor exception type name -> reason
_VERIFIER_REASONS: dict[str, Reason] = {
    "RewardFileNotFoundError": Outcome.NO_REWARD_FILE,
    "RewardFileEmptyError": Outcome.NO_REWARD_FILE,
    "VerifierTimeoutError": Outcome.VERIFIER_TIMEOUT,
    "CancelledError": Outcome.VERIFIER_TIMEOUT,  # harbor's wait_for cancelled verify(): its timeout fired
    "SandboxExecTimeout": Outcome.VERIFIER_TIMEOUT,
    "TimeoutError": Outcome.VERIFIER_TIMEOUT,
}
# Verifier failures that say the agent tried to steer its grade (the verifier's tamper check).
_TAMPER_ERRORS = {"TamperSuspect", "TamperSuspectError", "TamperError"}
# The verifier's own record of a pytest run contradicts its pass (tests missing, record absent).
_RECORD_ERRORS = {"TestsMissingError"}
_SANDBOX_ERRORS = {"SandboxError", "SandboxExecTimeout", "ImageError", "EnvironmentStartTimeoutError",
                   "SandboxBuildFailedError", "HealthcheckError", "AddTestsDirError", "DownloadVerifierDirError"}


class TrialSpec(BaseModel):
    """One trial to run."""

    model_config = ConfigDict(extra="forbid")

    task_dir: Path = Field(description="harbor task directory")
    agent: str | dict[str, Any] = Field(
        default="oracle", description="'oracle' | 'nop' | a harbor agent name | 'pkg.mod:Agent' | "
        "a harbor AgentConfig as a dict (name or import_path, kwargs, model_name, env, ...)")
    trials_root: Path = Field(default=Path("harbor_trials"), description="root of harbor_trials/")
    project: str = "default"
    experiment: str = "default"
    step: int = Field(default=0, ge=0)
    session: str | None = Field(default=None, description="trial directory name; default <task>__<random>")
    trials_dir: Path | None = Field(default=None, description="put the trial here instead of the step layout")
    backend: str = Field(default="docker", description="sandbox backend: docker | k8s | pkg.mod:Environment")
    environment_kwargs: dict[str, Any] = Field(default_factory=dict,
                                               description="backend options (network, image, registry, ...)")
    agent_timeout_sec: float | None = Field(default=None, gt=0, description="override [agent].timeout_sec")
    verifier_timeout_sec: float | None = Field(default=None, gt=0, description="override [verifier].timeout_sec")

    @field_validator("agent", mode="before")
    @classmethod
    def _agent_config_to_dict(cls, value: Any) -> Any:
        # a harbor AgentConfig object: keep it as data (secrets unredacted) so specs stay plain pydantic
        if isinstance(value, BaseModel):
            return value.model_dump(context={"redact_sensitive_env": False}, exclude_none=True)
        return value

    def step_dir(self) -> Path:
        if self.trials_dir is not None:
            return self.trials_dir
        return self.trials_root / self.project / self.experiment / f"step_{self.step}"


class TrialOutcome(BaseModel):
    """What a trial produced: one reward and the reason it is what it is."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    session: str
    reward: float = Field(description="the verifier's reward; 0 when there is none")
    rewards: dict[str, float] = Field(default_factory=dict, description="every value the verifier wrote")
    reason: Reason
    trial_dir: Path | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per harbor timing block + total")

    @property
    def graded(self) -> bool:
        """The verifier produced a reward (the reason may still flag an agent timeout or error)."""
        return bool(self.rewards)


def agent_config(agent: str | dict[str, Any] | Any):
    """A harbor AgentConfig from a short name, an import path, a dict or an AgentConfig."""
    from harbor.models.trial.config import AgentConfig

    if isinstance(agent, AgentConfig):
        return agent
    if isinstance(agent, dict):
        return AgentConfig.model_validate(agent)
    if not isinstance(agent, str) or not agent:
        raise UserError(f"agent must be a name or an AgentConfig, got {agent!r}", key="agent",
                        fix="use oracle, nop, a harbor agent name or pkg.module:AgentClass")
    if ":" in agent:
        return AgentConfig(import_path=agent)
    return AgentConfig(name=AGENT_ALIASES.get(agent, agent))


def environment_import_path(backend: str) -> str:
    from rlkit.sandbox import IMPORT_PATHS

    if ":" in backend:
        return backend
    if backend not in IMPORT_PATHS:
        raise UserError(f"unknown sandbox backend {backend!r}", key="backend",
                        fix=f"use one of {', '.join(sorted(IMPORT_PATHS))} or pkg.module:EnvironmentClass")
    return IMPORT_PATHS[backend]


def trial_config(spec: TrialSpec, session: str):
    """The harbor TrialConfig of a spec (labels and session go to the sandbox backend)."""
    from harbor.models.trial.config import EnvironmentConfig, TaskConfig, TrialConfig, VerifierConfig

    agent = agent_config(spec.agent)
    if spec.agent_timeout_sec is not None:
        agent = agent.model_copy(update={"override_timeout_sec": spec.agent_timeout_sec})
    env_kwargs = {"project": spec.project, "experiment": spec.experiment, "step": spec.step, "session": session,
                  **spec.environment_kwargs}
    if not env_kwargs.get("image"):  # the task names its image (a sandbox never does)
        from rlkit.tasks.images import read_task_spec, task_image_ref

        image = read_task_spec(spec.task_dir.expanduser().resolve(), registry=env_kwargs.get("registry"))
        variant = env_kwargs.get("image_variant") or "latest"
        env_kwargs["image"] = image.image if image.prebuilt or variant == "latest" else task_image_ref(
            image.task_id, env_kwargs.get("registry"), variant)
    return TrialConfig(
        task=TaskConfig(path=spec.task_dir.expanduser().resolve()),
        trial_name=session,
        trials_dir=spec.step_dir().expanduser().resolve(),
        agent=agent,
        environment=EnvironmentConfig(import_path=environment_import_path(spec.backend), kwargs=env_kwargs,
                                      delete=True),
        verifier=VerifierConfig(import_path=VERIFIER_IMPORT_PATH,
                                override_timeout_sec=spec.verifier_timeout_sec),
    )


def preload(agent: str | dict[str, Any] | Any, backend: str) -> float:
    """Import what a process's first trial imports inside harbor's `Trial` constructor: harbor's trial,
    the agent's and the sandbox's classes and the verifier. Those imports are synchronous, so in the first
    trial they stall every trial on the event loop (4-5 s alone, 66-85 s on a loaded 2-core machine);
    a worker calls this while it waits for other things. Returns the seconds it took."""
    started = time.perf_counter()
    from harbor.trial.trial import Trial  # noqa: F401 -- the import is the point
    from harbor.utils.import_path import import_class

    import_paths = [environment_import_path(backend), VERIFIER_IMPORT_PATH]
    if (config := agent_config(agent)).import_path:
        import_paths.append(config.import_path)
    for path in import_paths:
        import_class(path, label="preload")
    return time.perf_counter() - started


def _session_name(spec: TrialSpec) -> str:
    if spec.session:
        return spec.session
    return f"{spec.task_dir.resolve().name[:40]}__{uuid.uuid4().hex[:8]}"


async def run_trial(spec: TrialSpec) -> TrialOutcome:
    """Run one trial. A broken task directory raises UserError; every runtime failure is an outcome."""
    from rlkit.rollout._verifier import VERIFIER_FAILURES
    from rlkit.tasks.task import load_task

    task = load_task(spec.task_dir)
    session = _session_name(spec)
    config = trial_config(spec, session)
    trial_dir = config.trials_dir / session
    started = time.monotonic()
    trial = None
    try:
        from harbor.trial.trial import Trial

        trial = await Trial.create(config)
        result = await trial.run()
    except Exception as exc:  # noqa: BLE001 — harbor failed outside its own error handling
        return TrialOutcome(task_id=task.task_id, session=session, reward=0.0, reason=_reason_for(type(exc).__name__),
                            trial_dir=trial_dir if trial_dir.exists() else None,
                            exception_type=type(exc).__name__, exception_message=str(exc)[:2000],
                            timings={"total": time.monotonic() - started})
    finally:
        if trial is not None:
            await _remove_sandbox(trial)
        verifier_failure = VERIFIER_FAILURES.pop(str(trial_dir), None)
    return outcome_from_result(task.task_id, session, trial_dir, result, verifier_failure,
                               total=time.monotonic() - started)


async def _remove_sandbox(trial: Any) -> None:
    """harbor stops the sandbox in its own finally; make sure, in case that step failed or was cancelled."""
    env = getattr(trial, "agent_environment", None)
    if env is not None and getattr(env, "container_id", None):
        try:
            await asyncio.shield(env.stop(delete=True))
        except Exception as exc:  # noqa: BLE001 — the reaper (rlkit cleanup) finds it by label
            _log.warning("removing the sandbox of %s failed: %s", getattr(trial, "config", None), exc)


def outcome_from_result(task_id: str, session: str, trial_dir: Path, result: Any, verifier_failure: str | None,
                        total: float) -> TrialOutcome:
    """Reduce a harbor TrialResult to reward + reason."""
    rewards = dict(result.verifier_result.rewards or {}) if result.verifier_result is not None else {}
    exception = result.exception_info
    exc_type = exception.exception_type if exception else None
    if rewards:
        reward = float(rewards["reward"]) if "reward" in rewards else sum(rewards.values()) / len(rewards)
        reason: Reason = (Outcome.PASSED if reward > 0 else Outcome.FAILED_TESTS) if exc_type is None else (
            Outcome.AGENT_TIMEOUT if exc_type == "AgentTimeoutError" else Outcome.AGENT_ERROR)
        if verifier_failure in _TAMPER_ERRORS:
            reason = Outcome.TAMPER_SUSPECT
    else:
        reward = 0.0
        failure = verifier_failure or exc_type
        reason = _reason_for(failure) if failure else Outcome.VERIFIER_ERROR
        if verifier_failure is None and exc_type == "AgentTimeoutError":
            reason = Outcome.AGENT_TIMEOUT
    timings = {name: _seconds(getattr(result, name)) for name in TIMING_BLOCKS if getattr(result, name)}
    timings["total"] = total
    shown = exc_type
    if not rewards and verifier_failure and (exc_type is None or _reason_for(exc_type) != reason):
        shown = "VerifierTimeoutError" if reason is Outcome.VERIFIER_TIMEOUT else verifier_failure
    return TrialOutcome(
        task_id=task_id, session=session, reward=reward, rewards={k: float(v) for k, v in rewards.items()},
        reason=reason, trial_dir=trial_dir, exception_type=shown,
        exception_message=exception.exception_message[:2000] if exception else None, timings=timings)


def _reason_for(exc_type: str) -> Reason:
    if exc_type in _VERIFIER_REASONS:
        return _VERIFIER_REASONS[exc_type]
    if exc_type in _TAMPER_ERRORS:
        return Outcome.TAMPER_SUSPECT
    if exc_type in _RECORD_ERRORS:
        return Outcome.TESTS_MISSING
    if exc_type == "WorkProductError":  # the agent's work product is over its bound: a 0, the agent's
        return Outcome.FAILED_TESTS
    if exc_type in _SANDBOX_ERRORS:
        return Outcome.SANDBOX_ERROR
    if exc_type in ("VerifierOutputParseError", "RuntimeError", "VerifierNetworkError", "VerifierPluginError"):
        return Outcome.VERIFIER_ERROR
    if exc_type == "AgentTimeoutError":
        return Outcome.AGENT_TIMEOUT
    return Outcome.ERROR


def _seconds(timing: Any) -> float:
    if timing.started_at is None or timing.finished_at is None:
        return 0.0
    return (timing.finished_at - timing.started_at).total_seconds()


async def run_trials(specs: Sequence[TrialSpec], max_concurrency: int = 8) -> list[TrialOutcome]:
    """Run many trials, at most `max_concurrency` at a time; outcomes in the order of `specs`.

    A trial that fails in any way (even a broken task directory) becomes an outcome with
    reason `error`; it never cancels or fails the others."""
    if max_concurrency < 1:
        raise UserError(f"max_concurrency must be >= 1, got {max_concurrency}", key="max_concurrency",
                        fix="e.g. max_concurrency=8")
    gate = asyncio.Semaphore(max_concurrency)

    async def one(spec: TrialSpec) -> TrialOutcome:
        async with gate:
            try:
                return await run_trial(spec)
            except Exception as exc:  # noqa: BLE001 — isolation is the point
                return TrialOutcome(task_id=spec.task_dir.name, session=spec.session or "", reward=0.0,
                                    reason=Outcome.ERROR, exception_type=type(exc).__name__,
                                    exception_message=str(exc)[:2000])

    return list(await asyncio.gather(*(one(spec) for spec in specs)))
