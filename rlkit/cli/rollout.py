"""`rlkit rollout INDEX`: k attempts per task, pass rates into the index, a difficulty-filtered index.

    rlkit rollout train.parquet --model-path M -k 8 -o rollouts/train     # the policy through vLLM + proxy
    rlkit rollout train.parquet --agent oracle -k 1                       # the reference solutions, no vLLM

Writes, under the output directory: results.jsonl (one line per finished trial; run the
same command again to resume an interrupted pass), <index>.pass_rates.parquet (a copy of
the index with pass_rate filled in) and <index>.filtered.parquet (the rows whose pass rate
lies inside the thresholds, default 0 < p < 1), which TRAIN_FILES can point at. Trials
land in <out>/harbor_trials/<project>/<experiment>/step_0/. Python: `rlkit.rollout`.
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

    from rlkit import api
    from rlkit.cli._args import print_json
    from rlkit.cli._pass import pass_options, progress_bar

    index = Path(args.index)
    with progress_bar(f"rollout {index.name}", quiet=args.json) as progress:
        result = api.rollout(index, model_path=args.model_path, agent=args.agent, min_pass_rate=args.min_pass_rate,
                             max_pass_rate=args.max_pass_rate, inclusive=args.inclusive, progress=progress,
                             **pass_options(args))
    if args.json:
        print_json(result)
        return 0 if result.filtered else 1
    totals = result.totals
    print(f"✓ {totals['attempts']} trials of {totals['tasks']} tasks: {totals['passed']} passed, "
          f"{totals['graded'] - totals['passed']} failed, {totals['masked']} masked")
    for task_id, pass_rate in result.tasks.items():
        rate = "-" if pass_rate is None else f"{pass_rate:.2f}"
        print(f"  {task_id:<40} pass_rate {rate}")
    print(f"✓ pass rates: {result.pass_rates}")
    if result.filtered is None:
        print(f"✗ no task has a pass rate in {result.window_text()}: the filtered index was not written "
              "(widen the bounds, e.g. --inclusive)")
        return 1
    print(f"✓ {len(result.kept)} of {len(result.tasks)} tasks with pass rate in {result.window_text()}: "
          f"{result.filtered}")
    print(f"  use it: TRAIN_FILES={result.filtered.resolve()}")
    return 0
