"""`rlkit ckpt merge|prune`: checkpoints in verl's layout.

  rlkit ckpt merge PATH [-o OUT]     verl's model merger (fsdp backend) → a Hugging Face model folder
                                     PATH: a run's checkpoint folder (its latest step), global_step_N, or its actor/
  rlkit ckpt prune ROOT|CFG [--yes] [--include-latest]
                                     delete optimizer shards (optim_world_size_*), keep model shards and
                                     huggingface/; previews unless --yes; the latest step stays whole
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _root(text: str) -> Path:
    """A checkpoint root, or a run config's checkpoints/<project>/<exp>."""
    path = Path(text)
    if path.is_file():
        from rlkit.config.paths import RunPaths
        from rlkit.config.resolve import resolve

        resolved = resolve(path)
        c = resolved.config
        return RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME, c.EXP_NAME).checkpoints
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit ckpt", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a checkpoint into a Hugging Face model folder (verl's merger)")
    m.add_argument("path", help="checkpoint folder, global_step_N, or global_step_N/actor")
    m.add_argument("-o", "--target-dir", type=Path, help="output folder (default: global_step_N/merged_hf)")
    p = sub.add_parser("prune", help="delete optimizer shards, keep the model (preview unless --yes)")
    p.add_argument("root", help="a run's checkpoint folder (checkpoints/<project>/<exp>) or its run config")
    p.add_argument("--yes", action="store_true", help="delete (default: only list what would go)")
    p.add_argument("--include-latest", action="store_true", help="also the latest step (a resume then "
                   "restarts the optimizer)")
    args = parser.parse_args(argv)

    from rlkit.ops import checkpoints as C

    if args.cmd == "merge":
        actor = C.actor_dir(Path(args.path))
        target = args.target_dir or C.default_target(actor)
        print(f"merging {actor}\n  $ {' '.join(C.merge_command(actor, target))}")
        out = C.merge(actor, target)
        print(f"✓ merged model: {out}\n  serve or evaluate it: rlkit eval {out} INDEX")
        return 0
    plan = C.plan_prune(_root(args.root), include_latest=args.include_latest)
    verb = "deleted" if args.yes else "would delete"
    for shard in plan.shards:
        print(f"{verb} {shard}  ({C.human(shard.stat().st_size)})")
    if plan.kept_latest is not None:
        print(f"kept global_step_{plan.kept_latest} whole (the latest: a resume reads it; --include-latest prunes it)")
    total = plan.bytes
    if not plan.shards:
        print("nothing to prune")
    elif args.yes:
        print(f"✓ freed {C.human(C.prune(plan))}")
    else:
        print(f"would free {C.human(total)}; run again with --yes to delete")
    return 0
