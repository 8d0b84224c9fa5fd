"""`rlkit sft CFG | --model M --tasks T [--out DIR]`: warm-start a policy on teacher trajectories.

Records teacher trajectories of each train task (the oracle fix replayed through the real
scaffold, proxy and docker sandbox), fine-tunes the model on them with the RL loss's
mask, and prints the directory of the result. Cached: a second call with the same tasks,
model and settings returns at once, and a fresh clone on the same machine copies the model from
$RLKIT_CACHE_DIR/warm-starts (--no-machine-cache: neither read nor keep it there).
"""

from __future__ import annotations

import argparse


def _parser() -> argparse.ArgumentParser:
    from rlkit.train.sft import SftSettings

    defaults = SftSettings()
    parser = argparse.ArgumentParser(prog="rlkit sft", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", metavar="CFG",
                        help="run config: MODEL_PATH, TRAIN_FILES and SCAFFOLD come from it")
    parser.add_argument("--model", help="base HF model dir (overrides MODEL_PATH)")
    parser.add_argument("--tasks", help="task index .parquet (its train rows) or tasks dir (overrides TRAIN_FILES)")
    parser.add_argument("--val-fraction", type=float, default=None,
                        help="with a tasks dir (required there): train on the train part of the seeded split "
                             "`rlkit index build --val-fraction` makes; 0 teaches every task")
    parser.add_argument("--out", help="write the model here (default: <root>/.rlkit/models/sft-<hash>)")
    parser.add_argument("--scaffold", default=None, help=f"default: SCAFFOLD or {defaults.scaffold}")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--task-fraction", type=float, default=defaults.task_fraction,
                        help="share of tasks trained every epoch (the others once)")
    parser.add_argument("--target-replay", type=float, default=defaults.target_replay,
                        help="stop once the chance of replaying the teacher at temperature 1 reaches this")
    parser.add_argument("--teacher-samples", type=int, default=defaults.teacher_samples,
                        help="teacher trajectories recorded per task")
    parser.add_argument("--no-decoys", dest="decoys", action="store_false", default=defaults.decoys,
                        help="teach the oracle fix only, not the tasks' solution/decoys/*.sh beside it")
    parser.add_argument("--max-prompt", type=int, default=defaults.max_prompt,
                        help="prompt tokens kept per row (raise it for scaffolds with long system prompts: "
                             "OpenCode's first prompt is ~9.2k tokens with the tiny tokenizer)")
    parser.add_argument("--no-machine-cache", dest="machine_cache", action="store_false", default=True,
                        help="neither read nor keep a copy in $RLKIT_CACHE_DIR/warm-starts (default ~/.cache/rlkit), "
                             "where a fresh clone finds the warm start another clone on this machine built")
    parser.add_argument("--max-response", type=int, default=defaults.max_response,
                        help="response tokens kept per row")
    return parser


def main(argv: list[str]) -> int:
    from pathlib import Path

    from rlkit.errors import UserError
    from rlkit.train.sft import SftSettings, ensure_sft_model, warm_starts_dir

    args = _parser().parse_args(argv)
    model, tasks, scaffold, root = args.model, args.tasks, args.scaffold, Path(".rlkit/models")
    if args.config:
        from rlkit.config.resolve import resolve

        resolved = resolve(args.config)
        model = model or str(resolved.path("MODEL_PATH") or resolved.config.MODEL_PATH)
        tasks = tasks or str(resolved.path("TRAIN_FILES") or resolved.config.TRAIN_FILES)
        scaffold = scaffold or str(getattr(resolved.config.SCAFFOLD, "value", resolved.config.SCAFFOLD))
        root = resolved.root / ".rlkit" / "models"
    if not model or not tasks:
        raise UserError("rlkit sft needs a base model and train tasks", key="MODEL_PATH",
                        fix="give a run config (rlkit sft CFG) or --model DIR --tasks DIR")
    settings = SftSettings(epochs=args.epochs, lr=args.lr, task_fraction=args.task_fraction,
                           target_replay=args.target_replay, teacher_samples=args.teacher_samples, decoys=args.decoys,
                           max_prompt=args.max_prompt, max_response=args.max_response,
                           **({"scaffold": scaffold} if scaffold else {}))
    result = ensure_sft_model(model, tasks, root=root, settings=settings, val_fraction=args.val_fraction,
                              out_dir=args.out, shared=warm_starts_dir() if args.machine_cache else None)
    if result.copied_from:
        print(f"✓ warm-started model (cached; copied from this machine's {result.copied_from}): {result.model_dir}")
    elif result.cached:
        print(f"✓ warm-started model (cached): {result.model_dir}")
    else:
        print(f"✓ warm-started model: {result.model_dir}  (record {result.record_s:.0f}s, "
              f"fine-tune {result.finetune_s:.0f}s, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f})")
    return 0
