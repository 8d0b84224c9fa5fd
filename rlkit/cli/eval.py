"""`rlkit eval MODEL_DIR INDEX`: pass@1 and pass@k per task and overall (unbiased estimator).

    rlkit eval /models/global_step_30_hf val.parquet -k 4 -o evals/step_30

Runs k attempts per task of the model through the scaffold, the proxy and vLLM, then
prints a table and writes <out>/eval_results.json. results.jsonl keeps every finished
trial, so running the same command again resumes an interrupted evaluation. Python: `rlkit.eval`.
"""

from __future__ import annotations

import argparse

from rlkit.cli._pass import add_engine_flags


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlkit eval", description=__doc__.splitlines()[0])
    parser.add_argument("model", metavar="MODEL_DIR", help="HF model directory (e.g. a merged checkpoint)")
    parser.add_argument("index", metavar="INDEX", help="task index (parquet), e.g. the val split")
    add_engine_flags(parser)
    parser.add_argument("--agent", choices=["model", "oracle", "nop"], default="model",
                        help="model (default), or a reference agent to check the tasks themselves")
    return parser


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    keys = [key for key in results["overall"]]
    table = Table(title=f"pass@k (k={results['k']}, unbiased estimator)")
    table.add_column("task")
    table.add_column("graded", justify="right")
    table.add_column("passed", justify="right")
    for key in keys:
        table.add_column(key, justify="right")

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for tid, task in results["tasks"].items():
        table.add_row(tid, str(task["n"]), str(task["c"]), *(cell(task[key]) for key in keys))
    table.add_section()
    table.add_row("overall", "", "", *(cell(results["overall"][key]) for key in keys))
    from rlkit.config.display import styled_output

    console = Console(file=styled_output())
    console.print(table)
    stderr = (results.get("stderr") or {}).get("pass@1")
    if stderr is not None:
        console.print(f"pass@1 {cell(results['overall'].get('pass@1'))} ± {stderr:.3f} (one standard error over "
                      "the attempts, the tasks held fixed)", highlight=False)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from pathlib import Path

    from rlkit import api
    from rlkit.cli._args import print_json
    from rlkit.cli._pass import pass_options, progress_bar

    index = Path(args.index)
    with progress_bar(f"eval {index.name}", quiet=args.json) as progress:
        result = api.eval(args.model, index, agent=args.agent, progress=progress, **pass_options(args))
    if args.json:
        print_json(result)
        return 0
    print_table(result.as_dict())
    print(f"✓ results: {result.path}")
    return 0
