"""`rlkit tasks check TASKS_DIR|INDEX`: run the oracle and the no-op agent on every task, name the broken ones.

  rlkit tasks check examples/tasks
  rlkit tasks check train.parquet --write-index     # + a task_ok column preflight warns about

Python: `rlkit.tasks_check`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlkit.cli._args import add_json_flag, print_json


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlkit tasks", description="task-set health")
    sub = p.add_subparsers(dest="action", required=True)
    c = sub.add_parser("check", help="oracle must get 1 and the no-op agent 0 on every task, in real sandboxes")
    c.add_argument("source", type=Path, help="a task dir, a dir of task dirs, or a task index .parquet")
    c.add_argument("--concurrency", type=int, default=4, help="sandboxes at once (default %(default)s)")
    c.add_argument("--write-index", action="store_true",
                   help="write a task_ok column (and the reasons) into the index; preflight warns about false rows")
    c.add_argument("--trials-dir", type=Path, default=None,
                   help="keep the trials here (default: a temporary folder, removed afterwards)")
    c.add_argument("--registry", default=None, help="image registry prefix (default $REGISTRY)")
    c.add_argument("--network", default=None, choices=["none", "bridge", "host"],
                   help="sandbox network (default: each task's own network_mode)")
    add_json_flag(c)
    return p


def _check(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlkit import api
    from rlkit.config.display import styled_output

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(file=styled_output(sys.stderr)), transient=False) as bar:
        job = bar.add_task("checking tasks", total=None)

        def progress(done: int, total: int, task_id: str, what: str) -> None:
            bar.update(job, total=total, completed=done, description=f"{what:>6} {task_id[:40]}")

        result = api.tasks_check(args.source, concurrency=args.concurrency, write_index=args.write_index,
                                 trials_dir=args.trials_dir, registry=args.registry, network=args.network,
                                 progress=progress, log=lambda msg: print(msg, file=sys.stderr))
        total = 3 * len(result.tasks)
        bar.update(job, total=total, completed=total, description="done")
    if args.json:
        print_json(result)
        return 0 if result.ok else 1
    healths = result.tasks
    width = max((len(h.task_id) for h in healths), default=0)
    for health in healths:
        if health.ok:
            print(f"✓ {health.task_id.ljust(width)}  oracle 1, no-op 0")
        else:
            print(f"✗ {health.task_id.ljust(width)}  " + "\n    ".join(health.problems))
    print(f"{len(healths) - len(result.broken)} healthy, {len(result.broken)} broken (of {len(healths)} tasks)")
    if result.wrote_index:
        print(f"wrote task_ok into {args.source}")
    return 0 if result.ok else 1


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return _check(args)
