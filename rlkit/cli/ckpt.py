"""`rlkit ckpt merge|prune`: checkpoints in verl's layout.

  rlkit ckpt merge PATH [-o OUT] [--keep-dtype]
                                     verl's model merger (fsdp backend) → a Hugging Face model folder
                                     PATH: a run's checkpoint folder (its latest step), global_step_N, or its actor/
                                     weights in bf16 (verl's merger) unless --keep-dtype keeps the checkpoint's own
  rlkit ckpt prune ROOT|CFG [--yes] [--include-latest]
                                     delete optimizer shards (optim_world_size_*), keep model shards and
                                     huggingface/; previews unless --yes; the latest step stays whole
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlkit.cli._args import add_json_flag, add_set_flag, config_of, print_json


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit ckpt", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a checkpoint into a Hugging Face model folder (verl's merger)")
    m.add_argument("path", help="checkpoint folder, global_step_N, or global_step_N/actor")
    m.add_argument("-o", "--target-dir", type=Path, help="output folder (default: global_step_N/merged_hf)")
    m.add_argument("--keep-dtype", action="store_true",
                   help="write the weights in the checkpoint's own dtype, not verl's bf16 (the embedded run trains "
                        "and serves float32; bf16 rounding changes that policy's greedy choices)")
    add_json_flag(m)
    p = sub.add_parser("prune", help="delete optimizer shards, keep the model (preview unless --yes)")
    p.add_argument("root", help="a run's checkpoint folder (checkpoints/<project>/<exp>) or its run config")
    p.add_argument("--yes", action="store_true", help="delete (default: only list what would go)")
    p.add_argument("--include-latest", action="store_true", help="also the latest step (a resume then "
                   "restarts the optimizer)")
    add_set_flag(p)
    add_json_flag(p)
    args = parser.parse_args(argv)

    from rlkit import api
    from rlkit.ops import checkpoints as C

    if args.cmd == "merge":
        if not args.json:
            actor = C.actor_dir(Path(args.path))
            target = args.target_dir or C.default_target(actor)
            print(f"merging {actor}\n  $ {' '.join(C.merge_command(actor, target))}", flush=True)
            if args.keep_dtype:
                print(f"  $ {' '.join(C.keep_dtype_command(actor, target))}", flush=True)
        merged = api.ckpt_merge(args.path, args.target_dir, keep_dtype=args.keep_dtype)
        if args.json:
            print_json(merged)
        else:
            note = "" if args.keep_dtype else " (verl's merger; --keep-dtype keeps the checkpoint's own)"
            print(f"✓ merged model: {merged.target}, weights in {merged.dtype}{note}\n"
                  f"  serve or evaluate it: rlkit eval {merged.target} INDEX")
        return 0
    root = config_of(args, "root") if Path(args.root).is_file() else args.root
    plan = api.ckpt_prune(root, yes=args.yes, include_latest=args.include_latest)
    if args.json:
        print_json(plan)
        return 0
    verb = "deleted" if plan.deleted else "would delete"
    for shard, size in zip(plan.shards, plan.sizes, strict=True):
        print(f"{verb} {shard}  ({C.human(size)})")
    if plan.kept_latest is not None:
        print(f"kept global_step_{plan.kept_latest} whole (the latest: a resume reads it; --include-latest prunes it)")
    if not plan.shards:
        print("nothing to prune")
    elif plan.deleted:
        print(f"✓ freed {C.human(plan.freed)}")
    else:
        print(f"would free {C.human(plan.bytes)}; run again with --yes to delete")
    return 0
