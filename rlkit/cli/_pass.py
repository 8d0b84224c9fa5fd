"""What `rlkit rollout` and `rlkit eval` share: their flags (rlkit.api.passes.PassSettings) and a progress bar."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from rlkit.cli._args import add_json_flag, add_set_flag


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", "--attempts", type=int, default=4, help="attempts per task (default 4)")
    parser.add_argument("-o", "--out", default=None, help="output directory (default rollouts/<index name>)")
    parser.add_argument("--config", default=None, metavar="CFG",
                        help="a run config: scaffold, backend, MAX_SANDBOXES, MAX_RESP, TOOL_CALL_PARSER and "
                             "PROJECT_NAME from it, where the flags below leave them unset")
    add_set_flag(parser)
    parser.add_argument("--scaffold", default=None, help="cc | ohsdk | oc | terminus (default terminus)")
    parser.add_argument("--backend", default=None, help="sandbox backend: docker | k8s (default docker)")
    parser.add_argument("--max-sandboxes", type=int, default=None, help="trials at once (default 4)")
    parser.add_argument("--project", default=None, help="project name of harbor_trials/<project>/... "
                                                        "(default rollout)")
    parser.add_argument("--experiment", default=None, help="experiment name (default: the index file's stem)")
    parser.add_argument("--upstream", default=None,
                        help="URL of a vLLM server already serving the model: only the proxy is started")
    parser.add_argument("--served-model-name", default=None, help="the model's name on --upstream")
    parser.add_argument("--tool-call-parser", default=None, help="TOOL_CALL_PARSER of the model (default qwen3_coder)")
    parser.add_argument("--max-model-len", type=int, default=None, help="vLLM context window (default 32768)")
    parser.add_argument("--max-call-tokens", type=int, default=None, help="response tokens per model call")
    parser.add_argument("--max-resp", type=int, default=None, help="response tokens per trial (MAX_RESP; "
                                                                   "default 170000)")
    parser.add_argument("--max-calls", type=int, default=None, help="model calls per trial (default 100)")
    parser.add_argument("--max-turns", type=int, default=None, help="agent turns, where the scaffold supports it")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed vLLM and every attempt's sampling from (seed, task, attempt): two passes of one "
                             "model with one seed draw alike (a paired comparison); default: unseeded")
    parser.add_argument("--agent-timeout", type=float, default=None, help="override the tasks' agent timeout")
    parser.add_argument("--verifier-timeout", type=float, default=None, help="override the tasks' verifier timeout")
    add_json_flag(parser)


def pass_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as keyword arguments of `rlkit.rollout` / `rlkit.eval` (unset ones left out)."""
    from rlkit.api.passes import PassSettings
    from rlkit.cli._args import config_of

    options = {name: value for name, value in vars(args).items()
               if name in PassSettings.names() and name != "attempts" and value is not None}
    return {"k": args.attempts, "config": config_of(args), **options}


@contextlib.contextmanager
def progress_bar(title: str, quiet: bool) -> Iterator[Any]:
    """A rich progress bar of passes, failures and masked trials, as `progress(totals, total)` wants it
    (on stderr with --json, so stdout holds only the JSON)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlkit.config.display import styled_output

    def counts(totals: dict) -> str:
        return (f"[green]pass {totals['passed']}[/] [red]fail {totals['graded'] - totals['passed']}[/] "
                f"[yellow]masked {totals['masked']}[/]")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[counts]}"),
                  console=Console(file=styled_output(sys.stderr if quiet else None))) as bars:
        bar: list[Any] = []

        def update(totals: dict, total: int) -> None:
            if not bar:
                bar.append(bars.add_task(title, total=total, counts=""))
            bars.update(bar[0], completed=min(totals["attempts"], total), counts=counts(totals))

        yield update
