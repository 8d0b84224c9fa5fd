"""`rlkit eval MODEL_DIR INDEX`: pass@1 and pass@k per task and overall (unbiased estimator).

    rlkit eval /models/global_step_30_hf val.parquet -k 4 -o evals/step_30

Runs k attempts per task of the model through the scaffold, the proxy and vLLM, then
prints a table and writes <out>/eval_results.json. results.jsonl keeps every finished
trial, so running the same command again resumes an interrupted evaluation.
"""

from __future__ import annotations

import argparse

from rlkit.cli._pass import add_engine_flags

EVAL_RESULTS = "eval_results.json"


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

    Console(file=styled_output()).print(table)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from pathlib import Path

    from rlkit.cli._pass import engine_for, inference_for, out_dir, run_with_progress
    from rlkit.rollout.passes import RESULTS_FILE, pass_at_k_report, write_json
    from rlkit.tasks.index import load_index

    index = Path(args.index)
    rows = load_index(index)
    out = out_dir(args, index, "evals")
    experiment = args.experiment or f"eval-{index.stem}"
    model = args.model if args.agent == "model" else None
    with inference_for(model, args, out / "logs", experiment) as stack:
        engine = engine_for(args, args.agent, stack, out / "harbor_trials", experiment)
        tallies = run_with_progress(engine, rows, args.attempts, out / RESULTS_FILE, f"eval {index.name}")
    results = {"model": args.model, "index": str(index), "agent": args.agent, **pass_at_k_report(tallies, args.attempts)}
    path = write_json(out / EVAL_RESULTS, results)
    print_table(results)
    print(f"✓ results: {path}")
    return 0
