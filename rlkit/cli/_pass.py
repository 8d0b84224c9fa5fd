"""What `rlkit rollout` and `rlkit eval` share: their flags, inference, the engine and a progress bar."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DEFAULT_MAX_MODEL_LEN = 32768


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", "--attempts", type=int, default=4, help="attempts per task (default 4)")
    parser.add_argument("-o", "--out", default=None, help="output directory (default rollouts/<index name>)")
    parser.add_argument("--scaffold", default="terminus", help="cc | ohsdk | oc | terminus (default terminus)")
    parser.add_argument("--backend", default="docker", help="sandbox backend: docker | k8s")
    parser.add_argument("--max-sandboxes", type=int, default=4, help="trials at once (default 4)")
    parser.add_argument("--project", default="rollout", help="project name of harbor_trials/<project>/...")
    parser.add_argument("--experiment", default=None, help="experiment name (default: the index file's stem)")
    parser.add_argument("--upstream", default=None,
                        help="URL of a vLLM server already serving the model: only the proxy is started")
    parser.add_argument("--served-model-name", default=None, help="the model's name on --upstream")
    parser.add_argument("--tool-call-parser", default="qwen3_coder", help="TOOL_CALL_PARSER of the model")
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN, help="vLLM context window")
    parser.add_argument("--max-call-tokens", type=int, default=None, help="response tokens per model call")
    parser.add_argument("--max-resp", type=int, default=170000, help="response tokens per trial (MAX_RESP)")
    parser.add_argument("--max-calls", type=int, default=100, help="model calls per trial")
    parser.add_argument("--max-turns", type=int, default=None, help="agent turns, where the scaffold supports it")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed vLLM and every attempt's sampling from (seed, task, attempt): two passes of one "
                             "model with one seed draw alike (a paired comparison); default: unseeded")
    parser.add_argument("--agent-timeout", type=float, default=None, help="override the tasks' agent timeout")
    parser.add_argument("--verifier-timeout", type=float, default=None, help="override the tasks' verifier timeout")


def out_dir(args: argparse.Namespace, index: Path, command: str) -> Path:
    return Path(args.out) if args.out else Path(command) / index.stem


@contextlib.contextmanager
def inference_for(model_path: str | None, args: argparse.Namespace, log_dir: Path,
                  exp_name: str) -> Iterator[Any]:
    """vLLM + proxy for a model (nothing for the oracle / nop agents), torn down on exit."""
    if model_path is None:
        yield None
        return
    if args.upstream:
        from rlkit.proxy import ProxyConfig
        from rlkit.proxy.server import BackgroundProxy

        config = ProxyConfig(model_path=model_path, upstreams=[args.upstream], port=0,
                             served_model_name=args.served_model_name, tool_call_parser=args.tool_call_parser,
                             max_model_len=args.max_model_len, max_response_tokens=args.max_call_tokens)
        with BackgroundProxy(config) as proxy:
            yield SimpleNamespace(proxy_url=proxy.url, model_name=args.served_model_name or model_path,
                                  vllm_url=args.upstream)
        return
    from rlkit.launch.inference import InferenceConfig, inference, model_context_window

    window = min(args.max_model_len, model_context_window(model_path) or args.max_model_len)
    config = InferenceConfig(model_path=model_path, tool_call_parser=args.tool_call_parser, max_model_len=window,
                             max_response_tokens=args.max_call_tokens, exp_name=exp_name,
                             log_dir=log_dir, served_model_name=args.served_model_name or "policy",
                             seed=args.seed or 0)
    with inference(config) as stack:
        yield stack


def engine_for(args: argparse.Namespace, agent: str, stack: Any, trials_root: Path, experiment: str) -> Any:
    from rlkit.rollout.engine import EngineConfig, RolloutEngine

    config = EngineConfig(
        scaffold=args.scaffold, backend=args.backend, agent=agent, n_resp=args.attempts,
        max_sandboxes=args.max_sandboxes, project=args.project, experiment=experiment, trials_root=trials_root,
        model_name=getattr(stack, "model_name", None), proxy_url=getattr(stack, "proxy_url", None),
        agent_timeout_sec=args.agent_timeout, verifier_timeout_sec=args.verifier_timeout,
        max_calls_per_session=args.max_calls, max_response_tokens=args.max_resp, max_turns=args.max_turns,
        temperature=args.temperature, seed=args.seed)
    return RolloutEngine(config)


def run_with_progress(engine: Any, rows: list, k: int, results: Path, title: str) -> dict:
    """Run the pass under a rich progress bar that shows passes, failures and masked trials live."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlkit.rollout.passes import read_results, results_summary, run_pass, tally

    done = results_summary(tally(rows, read_results(results)))
    total = len(rows) * k

    def counts(totals: dict) -> str:
        return (f"[green]pass {totals['passed']}[/] [red]fail {totals['graded'] - totals['passed']}[/] "
                f"[yellow]masked {totals['masked']}[/]")

    from rich.console import Console

    from rlkit.config.display import styled_output

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[counts]}"), console=Console(file=styled_output())) as progress:
        bar = progress.add_task(title, total=total, completed=min(done["attempts"], total), counts=counts(done))

        def on_result(_result: Any, tallies: dict) -> None:
            totals = results_summary(tallies)
            progress.update(bar, completed=min(totals["attempts"], total), counts=counts(totals))

        return asyncio.run(run_pass(engine, rows, k, results, on_result=on_result))
