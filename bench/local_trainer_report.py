"""Per-step time split and reward of a local-trainer run, from its JSONL file log.

    .venv/bin/python bench/local_trainer_report.py logs/tiny-terminus.jsonl

Prints, per step: step time and its split (rollout = timing_s/gen, update = timing_s/update_actor,
sync = timing_s/update_weights, save, validation), the reward mean and pass rate; then the
means over the training steps, the step time without validation and its rollout share,
val/pass@1 where it was measured, and the reward mean of the last three steps against the first three.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import mean

COLUMNS = (("step_s", "timing_s/step"), ("rollout_s", "timing_s/gen"), ("update_s", "timing_s/update_actor"),
           ("sync_s", "timing_s/update_weights"), ("save_s", "timing_s/save_checkpoint"),
           ("val_s", "timing_s/testing"), ("reward", "critic/rewards/mean"), ("pass", "rollout/pass_rate"),
           ("masked", "rollout/masked"), ("resp_len", "response_length/mean"))


def load(path: Path) -> dict[int, dict]:
    steps: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        steps[int(record["step"])] = record["data"]  # a resumed step's last record wins
    return dict(sorted(steps.items()))


def main(argv: list[str]) -> int:
    steps = load(Path(argv[0]))
    print("step " + " ".join(f"{name:>9}" for name, _ in COLUMNS))
    for step, data in steps.items():
        cells = [data.get(key) for _, key in COLUMNS]
        print(f"{step:>4} " + " ".join(f"{v:>9.3f}" if isinstance(v, int | float) else f"{'-':>9}" for v in cells))
    if not steps:
        return 1
    rows = [r for r in steps.values() if "critic/rewards/mean" in r]  # training steps (not step 0's validation)
    for name, key in COLUMNS[1:4]:
        values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        if values:
            print(f"mean {name}: {mean(values):.2f}")
    # a step's own time: its validation (verl logs it in the same step) left out
    train_s = [r.get("timing_s/step", 0.0) - r.get("timing_s/testing", 0.0) for r in rows]
    gen_s = sum(r.get("timing_s/gen", 0.0) for r in rows)
    val_s = sum(r.get("timing_s/testing", 0.0) for r in steps.values())
    if train_s:
        print(f"mean step_s without validation: {mean(train_s):.2f}; {sum(train_s):.0f}s over {len(rows)} steps, "
              f"rollout share {gen_s / sum(train_s):.2f}; validation {val_s:.0f}s in all")
    pass_at_1 = [(step, d["val/pass@1"]) for step, d in steps.items() if "val/pass@1" in d]
    if pass_at_1:
        print("val/pass@1 " + ", ".join(f"step {step}: {value:.3f}" for step, value in pass_at_1))
    rewards = [r["critic/rewards/mean"] for r in rows]
    if len(rewards) >= 6:
        print(f"reward mean, first 3 steps {mean(rewards[:3]):.3f} -> last 3 steps {mean(rewards[-3:]):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
