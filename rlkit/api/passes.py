"""What `rlkit.rollout` and `rlkit.eval` share: their settings, inference for a model, the engine, the pass.

A pass runs k attempts per index row through the rollout engine (rlkit.rollout.passes), with vLLM
and the proxy up when the agent is the model (or only the proxy, in front of a vLLM already serving
it). Settings come from keyword options, else from a run config when one is given (SCAFFOLD,
BACKEND, MAX_SANDBOXES, MAX_RESP, TOOL_CALL_PARSER, PROJECT_NAME), else from the defaults below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig
    from rlkit.rollout.passes import EvalResult, RolloutResult

DEFAULT_MAX_MODEL_LEN = 32768
# progress(totals, total): once with what an earlier run left (a resumed pass), then after every trial
Progress = Callable[[dict[str, int], int], None]


@dataclass(frozen=True)
class PassSettings:
    """The options of `rlkit rollout` / `rlkit eval` (their flags, by the same names). None: from the
    run config when one is given, else the default noted."""

    attempts: int = 4  # -k: attempts per task
    out: str | Path | None = None  # default rollouts/<index stem> (eval: evals/<index stem>)
    scaffold: str | None = None  # cc | ohsdk | oc | terminus (default terminus)
    agent_delivery: str | None = None  # auto | mount | bake: the in-container agent mounted or baked (AGENT_DELIVERY)
    backend: str | None = None  # docker | k8s (default docker)
    max_sandboxes: int | None = None  # trials at once (default 4)
    project: str | None = None  # harbor_trials/<project>/... (default "rollout")
    experiment: str | None = None  # default: the index's stem (eval: eval-<stem>)
    upstream: str | None = None  # a vLLM already serving the model: only the proxy is started
    served_model_name: str | None = None  # the model's name on `upstream`
    tool_call_parser: str | None = None  # default qwen3_coder
    max_model_len: int = DEFAULT_MAX_MODEL_LEN  # vLLM context window (capped by the model's)
    max_call_tokens: int | None = None  # response tokens per model call
    max_resp: int | None = None  # response tokens per trial (MAX_RESP; default 170000)
    max_calls: int = 100  # model calls per trial
    max_turns: int | None = None  # agent turns, where the scaffold supports it
    temperature: float | None = None
    seed: int | None = None  # seeds vLLM and each attempt from (seed, task, attempt): a paired comparison
    agent_timeout: float | None = None  # override the tasks' agent timeout (s)
    verifier_timeout: float | None = None  # override the tasks' verifier timeout (s)

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))

    def with_config(self, resolved: ResolvedConfig | None) -> PassSettings:
        """Unset options from the run config, then the built-in defaults."""
        c = resolved.config if resolved is not None else None
        taken = {
            "scaffold": str(c.SCAFFOLD) if c else "terminus", "backend": str(c.BACKEND) if c else "docker",
            "agent_delivery": str(c.AGENT_DELIVERY) if c else "auto",
            "max_sandboxes": c.MAX_SANDBOXES if c else 4, "project": (c.PROJECT_NAME or None) if c else None,
            "tool_call_parser": str(c.TOOL_CALL_PARSER) if c else "qwen3_coder",
            "max_resp": c.MAX_RESP if c else 170000,
        }
        filled = {k: v for k, v in taken.items() if getattr(self, k) is None and v is not None}
        out = replace(self, **filled)
        return out if out.project else replace(out, project="rollout")


def out_dir(settings: PassSettings, index: Path, command: str) -> Path:
    """Where a pass writes (absolute, so a result's paths hold wherever it is read)."""
    return (Path(settings.out) if settings.out else Path(command) / index.stem).absolute()


def speaks_anthropic(scaffold: str | None) -> bool:
    """Does the scaffold call the proxy's Anthropic API (the proxy then imports its adapter at start)?"""
    from rlkit.config.schema import AgentApi
    from rlkit.scaffolds import get_scaffold

    return get_scaffold(scaffold or "terminus").api_format is AgentApi.ANTHROPIC


@contextlib.contextmanager
def inference_for(model_path: str | None, s: PassSettings, log_dir: Path, exp_name: str) -> Iterator[Any]:
    """vLLM + proxy for a model (nothing for the oracle / nop agents), torn down on exit."""
    if model_path is None:
        yield None
        return
    if s.upstream:
        from rlkit.proxy import ProxyConfig
        from rlkit.proxy.server import BackgroundProxy

        config = ProxyConfig(model_path=model_path, upstreams=[s.upstream], port=0,
                             served_model_name=s.served_model_name, tool_call_parser=s.tool_call_parser,
                             max_model_len=s.max_model_len, max_response_tokens=s.max_call_tokens,
                             warm_anthropic=speaks_anthropic(s.scaffold))
        with BackgroundProxy(config) as proxy:
            yield SimpleNamespace(proxy_url=proxy.url, model_name=s.served_model_name or model_path,
                                  vllm_url=s.upstream)
        return
    from rlkit.launch.inference import InferenceConfig, inference, model_context_window

    window = min(s.max_model_len, model_context_window(model_path) or s.max_model_len)
    config = InferenceConfig(model_path=model_path, tool_call_parser=s.tool_call_parser, max_model_len=window,
                             max_response_tokens=s.max_call_tokens, exp_name=exp_name,
                             log_dir=log_dir, served_model_name=s.served_model_name or "policy",
                             seed=s.seed or 0, warm_anthropic=speaks_anthropic(s.scaffold))
    preloading = preload_while(s.scaffold or "terminus", s.backend or "docker")
    with inference(config) as stack:
        preloading.join()
        yield stack


def preload_while(scaffold: str, backend: str) -> threading.Thread:
    """The trial stack's imports in a thread, while vLLM boots (see rlkit.rollout.trial.preload)."""
    from rlkit.rollout.engine import preload

    def run() -> None:
        try:
            log.info("trial stack preloaded in %.1fs", preload(scaffold, backend))
        except Exception as exc:  # noqa: BLE001 -- the first trial imports (and reports) it again
            log.debug("preload failed: %s", exc)

    thread = threading.Thread(target=run, name="rlkit-preload", daemon=True)
    thread.start()
    return thread


def engine_for(s: PassSettings, agent: str, stack: Any, trials_root: Path, experiment: str) -> Any:
    from rlkit.rollout.engine import EngineConfig, RolloutEngine

    config = EngineConfig(
        scaffold=s.scaffold, backend=s.backend, agent_delivery=s.agent_delivery or "auto", agent=agent,
        n_resp=s.attempts,
        max_sandboxes=s.max_sandboxes, project=s.project, experiment=experiment, trials_root=trials_root,
        model_name=getattr(stack, "model_name", None), proxy_url=getattr(stack, "proxy_url", None),
        agent_timeout_sec=s.agent_timeout, verifier_timeout_sec=s.verifier_timeout,
        max_calls_per_session=s.max_calls, max_response_tokens=s.max_resp, max_turns=s.max_turns,
        temperature=s.temperature, seed=s.seed)
    return RolloutEngine(config)


def run_pass(engine: Any, rows: list, k: int, results: Path, progress: Progress | None) -> dict:
    """The pass (resumed from `results`), reporting totals to `progress` as trials finish."""
    from rlkit.rollout.passes import read_results, results_summary, run_pass, tally

    total = len(rows) * k
    if progress:
        progress(results_summary(tally(rows, read_results(results))), total)

    def on_result(_result: Any, tallies: dict) -> None:
        if progress:
            progress(results_summary(tallies), total)

    return asyncio.run(run_pass(engine, rows, k, results, on_result=on_result))


def check_model(model_path: str, settings: PassSettings) -> None:
    """The model folder's checks of `rlkit check` (rlkit.validate.model_folder); UserError on a FATAL one."""
    from rlkit.validate.model_folder import require_model_folder

    require_model_folder(model_path, settings.tool_call_parser or "qwen3_coder")


def rollout_pass(index: Path, *, model_path: str | None, agent: str | None, settings: PassSettings,
                 low: float, high: float, inclusive: bool, progress: Progress | None) -> RolloutResult:
    from rlkit.rollout.passes import RESULTS_FILE, rollout_result
    from rlkit.tasks.index import load_index

    rows = load_index(index)
    if model_path is not None:
        check_model(model_path, settings)
    out = out_dir(settings, index, "rollouts")
    experiment = settings.experiment or index.stem
    with inference_for(model_path, settings, out / "logs", experiment) as stack:
        engine = engine_for(settings, agent or "model", stack, out / "harbor_trials", experiment)
        tallies = run_pass(engine, rows, settings.attempts, out / RESULTS_FILE, progress)
    return rollout_result(index, out, rows, tallies, low=low, high=high, inclusive=inclusive)


def eval_pass(model: str, index: Path, *, agent: str, settings: PassSettings,
              progress: Progress | None) -> EvalResult:
    from rlkit.rollout.passes import RESULTS_FILE, eval_result
    from rlkit.tasks.index import load_index

    rows = load_index(index)
    if agent == "model":  # what `rlkit check` checks of MODEL_PATH, with its budgets, before vLLM starts
        check_model(model, settings)
    out = out_dir(settings, index, "evals")
    experiment = settings.experiment or f"eval-{index.stem}"
    with inference_for(model if agent == "model" else None, settings, out / "logs", experiment) as stack:
        engine = engine_for(settings, agent, stack, out / "harbor_trials", experiment)
        tallies = run_pass(engine, rows, settings.attempts, out / RESULTS_FILE, progress)
    return eval_result(model, index, agent, settings.attempts, tallies, out / "eval_results.json")
