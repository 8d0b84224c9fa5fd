"""`rlkit rollout INDEX`: k attempts per task, pass rates into the index, a difficulty-filtered index.

    rlkit rollout train.parquet --model-path M -k 8 -o rollouts/train     # the policy through vLLM + proxy
    rlkit rollout train.parquet --agent oracle -k 1                       # the reference solutions, no vLLM

Writes, under the output directory: results.jsonl (one line per finished trial; run the
same command again to resume an interrupted pass), <index>.pass_rates.parquet (a copy of
the index with pass_rate filled in) and <index>.filtered.parquet (the rows whose pass rate
lies inside the thresholds, default 0 < p < 1), which TRAIN_FILES can point at. Trials
land in <out>/harbor_trials/<project>/<experiment>/step_0/.
"""

from __future__ import annotations

import argparse

from rlkit.cli._pass import add_engine_flags


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlkit rollout", description=__doc__.splitlines()[0])
    parser.add_argument("index", metavar="INDEX", help="task index (parquet)")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--model-path", default=None, help="policy checkpoint (HF directory) served by vLLM")
    who.add_argument("--agent", choices=["oracle", "nop"], default=None, help="a reference agent instead of a model")
    add_engine_flags(parser)
    parser.add_argument("--min-pass-rate", type=float, default=0.0, help="lower bound of the filter (default 0)")
    parser.add_argument("--max-pass-rate", type=float, default=1.0, help="upper bound of the filter (default 1)")
    parser.add_argument("--inclusive", action="store_true", help="bounds are inclusive (default: exclusive)")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from pathlib import Path

    from rlkit.cli._pass import engine_for, inference_for, out_dir, run_with_progress
    from rlkit.rollout.passes import RESULTS_FILE, difficulty_filter, results_summary, with_pass_rates
    from rlkit.tasks.index import load_index, write_index

    index = Path(args.index)
    rows = load_index(index)
    out = out_dir(args, index, "rollouts")
    experiment = args.experiment or index.stem
    with inference_for(args.model_path, args, out / "logs", experiment) as stack:
        engine = engine_for(args, args.agent or "model", stack, out / "harbor_trials", experiment)
        tallies = run_with_progress(engine, rows, args.attempts, out / RESULTS_FILE, f"rollout {index.name}")

    rated = with_pass_rates(rows, tallies)
    rated_path = write_index(rated, out / f"{index.stem}.pass_rates.parquet")
    kept = difficulty_filter(rated, args.min_pass_rate, args.max_pass_rate, inclusive=args.inclusive)
    totals = results_summary(tallies)
    print(f"✓ {totals['attempts']} trials of {totals['tasks']} tasks: {totals['passed']} passed, "
          f"{totals['graded'] - totals['passed']} failed, {totals['masked']} masked")
    for row in rated:
        rate = "-" if row.pass_rate is None else f"{row.pass_rate:.2f}"
        print(f"  {row.task_id:<40} pass_rate {rate}")
    print(f"✓ pass rates: {rated_path}")
    bounds = "[]" if args.inclusive else "()"
    window = f"{bounds[0]}{args.min_pass_rate:g}, {args.max_pass_rate:g}{bounds[1]}"
    if not kept:
        print(f"✗ no task has a pass rate in {window}: the filtered index was not written "
              "(widen the bounds, e.g. --inclusive)")
        return 1
    filtered_path = write_index(kept, out / f"{index.stem}.filtered.parquet")
    print(f"✓ {len(kept)} of {len(rated)} tasks with pass rate in {window}: {filtered_path}")
    print(f"  use it: TRAIN_FILES={filtered_path.resolve()}")
    return 0
