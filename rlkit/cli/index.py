"""`rlkit index build|show`: task indexes (parquet pointer tables verl can load).

  rlkit index build my-tasks -o data/train.parquet --val-fraction 0.3 --val-output data/val.parquet
      both parts of one seeded split at once (or one part: --split train|val, the same fraction and seed)
"""

from __future__ import annotations

import argparse
import os


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlkit index", description="build and inspect task indexes")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="index every harbor task under TASKS_DIR")
    build.add_argument("tasks_dir", metavar="TASKS_DIR")
    build.add_argument("-o", "--output", required=True, metavar="FILE.parquet")
    build.add_argument("--split", default="train", choices=["train", "val", "test"],
                       help="split of the rows written (with --val-fraction: which part to write)")
    build.add_argument("--registry", default=os.environ.get("REGISTRY") or None,
                       help="registry prefix of task images (default $REGISTRY, as `rlkit images build`)")
    build.add_argument("--val-fraction", type=float, default=None,
                       help="hold out this fraction as val; run once with --split train, once with --split val")
    build.add_argument("--val-output", metavar="VAL.parquet", default=None,
                       help="with --val-fraction: also write the held-out part here (-o gets the train part)")
    build.add_argument("--seed", type=int, default=0, help="seed of the train/val split")
    build.add_argument("--data-source", default="rlkit_tasks", help="verl data_source (metric group name)")
    show = sub.add_parser("show", help="validate an index and print its rows")
    show.add_argument("index", metavar="FILE.parquet")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from rlkit.tasks.index import build_index, load_index

    if args.command == "build" and args.val_output:
        from rlkit.errors import UserError

        if args.val_fraction is None or args.split != "train":
            raise UserError("--val-output writes the held-out part of a split", key="--val-output",
                            fix="give --val-fraction (and leave --split at train: -o gets the train part)")
        for split, output in (("train", args.output), ("val", args.val_output)):
            rows = build_index(args.tasks_dir, output, split, registry=args.registry,
                               val_fraction=args.val_fraction, seed=args.seed, data_source=args.data_source)
            print(f"✓ wrote {len(rows)} {split} task(s) to {output}")
        return 0
    if args.command == "build":
        rows = build_index(args.tasks_dir, args.output, args.split, registry=args.registry,
                           val_fraction=args.val_fraction, seed=args.seed, data_source=args.data_source)
        print(f"✓ wrote {len(rows)} {args.split} task(s) to {args.output}")
        return 0
    rows = load_index(args.index)
    width = max(len(r.task_id) for r in rows)
    for row in rows:
        extra = " ".join(f"{k}={v}" for k, v in (("difficulty", row.difficulty), ("pass_rate", row.pass_rate))
                         if v is not None)
        print(f"{row.task_id.ljust(width)}  {row.split:5}  {row.image}  {extra}".rstrip())
    print(f"✓ {len(rows)} row(s) in {args.index}")
    return 0
