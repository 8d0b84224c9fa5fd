"""`rlkit tasks check TASKS_DIR|INDEX`: run the oracle and the no-op agent on every task, name the broken ones.

  rlkit tasks check examples/tasks
  rlkit tasks check train.parquet --write-index     # + a task_ok column preflight warns about
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path


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
    c.add_argument("--registry", default=os.environ.get("REGISTRY") or None, help="image registry prefix")
    c.add_argument("--network", default=None, choices=["none", "bridge", "host"],
                   help="sandbox network (default: each task's own network_mode)")
    return p


def _check(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlkit.errors import UserError
    from rlkit.rollout.task_check import check_tasks, write_task_ok
    from rlkit.sandbox.base_image import ensure_base_image
    from rlkit.tasks.images import discover_tasks

    is_index = args.source.is_file() and args.source.suffix == ".parquet"
    if args.write_index and not is_index:
        raise UserError(f"--write-index needs a task index, not {args.source}", key="--write-index",
                        fix="build one with `rlkit index build TASKS_DIR -o FILE.parquet` and check that")
    if args.concurrency < 1:
        raise UserError("--concurrency must be >= 1", key="--concurrency", fix="e.g. --concurrency 4")
    specs = discover_tasks(args.source, registry=args.registry)
    if any(spec.dockerfile and not spec.prebuilt for spec in specs):
        ensure_base_image(log=lambda msg: print(msg, file=sys.stderr))
    from rlkit.config.display import styled_output

    console = Console(file=styled_output(sys.stderr))
    env = {"network": args.network} if args.network else {}
    with tempfile.TemporaryDirectory(prefix="rlkit-tasks-check-") as tmp:
        root = args.trials_dir or Path(tmp)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            job = bar.add_task("checking tasks", total=3 * len(specs))
            healths = asyncio.run(check_tasks(
                specs, trials_root=root, max_concurrency=args.concurrency, environment_kwargs=env,
                progress=lambda task_id, what: bar.update(job, advance=1,
                                                          description=f"{what:>6} {task_id[:40]}")))
            bar.update(job, completed=3 * len(specs), description="done")
    width = max((len(h.task_id) for h in healths), default=0)
    for health in healths:
        if health.ok:
            print(f"✓ {health.task_id.ljust(width)}  oracle 1, no-op 0")
        else:
            print(f"✗ {health.task_id.ljust(width)}  " + "\n    ".join(health.problems))
    broken = [h for h in healths if not h.ok]
    print(f"{len(healths) - len(broken)} healthy, {len(broken)} broken (of {len(healths)} tasks)")
    if args.write_index:
        write_task_ok(args.source, healths)
        print(f"wrote task_ok into {args.source}")
    return 1 if broken else 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return _check(args)
