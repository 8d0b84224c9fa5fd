"""Learning: what the embedded run learns beyond a control arm, with 95% intervals over seeds.

For each seed and each arm the embedded trainer (`rlkit train`, TRAINER=local, the embedded
default's config with SEED, LR and a few names changed) trains --steps steps from the
warm-started policy:

  rl       the embedded default's learning rate
  control  LR 0: the same trials, steps, updates and weight syncs with the update switched off
           (AdamW at LR 0 leaves every weight as it was), so what it gains is noise. The bench checks
           that its last policy is the warm start bit for bit (`control_weights_change`); since it is,
           --control-steps may end the control sooner than the rl arm (its last validation is any step's)

Each run validates at step 0 and at its last step on both task sets: the train tasks and the
held-out val tasks (one index, each row's data_source naming its set), --val-n attempts each.
Validation attempts are seeded per (SEED, task, attempt), so one policy validated twice draws
alike: a run's before and after are paired, and a control's gain is what the loop itself
changes (the server, the machine, the sandboxes), not the sampler's luck.

Beside the two arms, a temperature control: the warm start evaluated (`rlkit eval`, the same
seeded attempts as validation) at each of --temps (default 0.6 and 0, greedy) besides the run's own
temperature (1.0: the rl arm's step-0 validation). Sharpening a distribution is what a lower
temperature gives for free, so RL's gain must clear the best of these too. The rl arm's last-step
policy (its checkpoint, merged to HF) is evaluated at the same temperatures, so both sides can be
compared at their best (`rl_at_temperature/<T>/<set>`, `rl_best_beyond_temperature/<set>`).
--val-freq N validates every N steps as well (a 16-step stability run read at 0, 8 and 16).
--family (default examples/heldout-family: the train tasks' code with other instruction constants and graded
data, never trained on) evaluates the warm start and the rl arm's last policy on those held-out family
members at 1.0 and each of --temps, the same seeded attempts (`family/<T>`, `rl_best_beyond_temperature/family`).

Reported per arm, pooled over seeds: pass@1 before and after on each task set and the paired
gain, each with a 95% percentile bootstrap over seeds, tasks and attempts; then RL's gain beyond
the control's (the same seeds' difference, bootstrapped jointly), and RL's pass@1 after training
beyond the best pass@1 the warm start reaches by temperature alone (paired by seed, task and
attempt), as `rl_beyond_control/<set>` and `rl_beyond_temperature/<set>` in learning.json's
`summary`. --lr-sweep 3,10 also trains the rl arm at those multiples of its LR (`rl-x3-s<seed>`, ...)
and says whether each still gains or ends no lower than its start by more than the control's
interval allows (the stability check), and whether `rlkit status` names a collapse in each run (the
x10 run should be named, the default not). Also the reward per training
step (a table and a PNG, one line per seed and arm) and the wall time of every run. Everything
printed goes to <out>/learning.json. A run that finished is not run again (delete its folder).
--trainer verl trains the rl arm through TRAINER=verl (examples/configs/embedded-verl.env, verl's own
main_ppo) as `verl-rl-s<seed>` and sets its gain beside the local rl arm's (<out>/learning-verl.json).
Seeds can run as parallel processes into one --out (each `--seeds N`; each process takes a free proxy port
unless --set PROXY_PORT=... names one); a last `--seeds 0,1,2` call skips the finished runs and pools them.

    python bench/learning.py [--seeds 0,1,2] [--steps 12] [--val-n 8] [--val-freq N] [--temps 0.6,0]
                             [--lr-sweep 3,10] [--arms rl,control] [--control-steps N] [--family DIR] [--set KEY=VALUE]
                             [--trainer local|verl] [--out .rlkit/bench/learning]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "configs" / "embedded.env"
VERL_CONFIG = ROOT / "examples" / "configs" / "embedded-verl.env"  # --trainer verl: verl's own main_ppo
RLKIT = [sys.executable, "-m", "rlkit.cli.main"]
ARMS = ("rl", "control")
SETS = {"train": "train_tasks", "heldout": "heldout_tasks"}  # task set -> data_source in the val index


def sh(args: list[str], **kwargs: Any) -> None:
    subprocess.run(args, cwd=ROOT, check=True, **kwargs)


def prepare(out: Path) -> tuple[Path, Path]:
    """The quickstart's pieces (cached, idempotent): images, tiny model, indexes, warm start; and one
    validation index holding both task sets."""
    from rlkit.tasks.index import load_index, write_index

    sh([*RLKIT, "images", "dockerd"])
    sh([*RLKIT, "images", "base"])
    sh([*RLKIT, "images", "build", "examples/tasks"])
    sh([*RLKIT, "model", "tiny", ".rlkit/models/tiny-qwen3"], stdout=subprocess.DEVNULL)
    indexes = ROOT / ".rlkit" / "indexes"
    indexes.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        sh([*RLKIT, "index", "build", "examples/tasks", "-o", str(indexes / f"{split}.parquet"), "--split", split,
            "--val-fraction", "0.3"], stdout=subprocess.DEVNULL)
    sh([*RLKIT, "sft", str(CONFIG), "--model", ".rlkit/models/tiny-qwen3", "--out", ".rlkit/models/tiny-qwen3-sft"])
    rows = [r.model_copy(update={"data_source": SETS["train"], "split": "val"})
            for r in load_index(indexes / "train.parquet")]
    rows += [r.model_copy(update={"data_source": SETS["heldout"]}) for r in load_index(indexes / "val.parquet")]
    both = write_index(rows, out / "val_both.parquet")
    return ROOT / ".rlkit" / "models" / "tiny-qwen3-sft", both


def with_proxy_port(sets: list[str]) -> list[str]:
    """--set as given, with a free PROXY_PORT unless one is given: seeds run as parallel processes need none."""
    from rlkit.launch.plan import free_port  # the kernel's pick: this bench process's own proxy port

    return sets if any(kv.startswith("PROXY_PORT=") for kv in sets) else [*sets, f"PROXY_PORT={free_port('127.0.0.1')}"]


def run_config(out: Path, exp: str, seed: int, args: argparse.Namespace, model: Path, val_index: Path,
               lr: str, config: Path = CONFIG, steps: int | None = None) -> Path:
    """The embedded default's config with this run's keys replaced (a config is parsed, never sourced)."""
    steps = steps or args.steps
    overrides = {**dict(kv.split("=", 1) for kv in args.set),
                 "EXP_NAME": exp, "OUTPUT_DIR": str(out / "runs"), "SEED": str(seed), "LR": lr,
                 "MODEL_PATH": str(model), "VAL_FILES": str(val_index), "VAL_N": str(args.val_n),
                 "TOTAL_STEPS": str(steps), "TRAINER_TEST_FREQ": str(args.val_freq or steps),
                 "TRAINER_SAVE_FREQ": str(steps),  # the last step's policy, judged at low temperature too
                 "RESUME_MODE": "disable"}
    lines = []
    for line in config.read_text().splitlines():
        name = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and name in overrides:
            continue
        lines.append(line)
    lines += [f"{k}={v}" for k, v in overrides.items()]
    path = out / "configs" / f"{exp}.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def val_dir(out: Path, exp: str, step: int) -> Path:
    return out / "runs" / "harbor_trials" / "embedded" / f"{exp}_val" / f"step_{step}"


def train(out: Path, exp: str, seed: int, args: argparse.Namespace, model: Path, val_index: Path,
          lr: str, base: Path = CONFIG, steps: int | None = None) -> float | None:
    """One run (skipped when its last validation is on disk); its wall seconds."""
    steps = steps or args.steps
    last = val_dir(out, exp, steps)
    if (last / "eval.json").is_file() or (base == VERL_CONFIG and (last / "summary.json").is_file()):
        return None
    config = run_config(out, exp, seed, args, model, val_index, lr, base, steps)
    log = out / "logs" / f"{exp}.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"… {exp}: training {steps} steps (log {log})", flush=True)
    started = time.perf_counter()
    with log.open("w") as sink:
        proc = subprocess.run([*RLKIT, "train", str(config)], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{exp} failed (exit {proc.returncode}); see {log}")
    (out / "runs" / f"{exp}.wall").write_text(f"{wall:.1f}\n")
    return wall


def passes(results: Path, sources: dict[str, str]) -> dict[str, dict[str, dict[int, float]]]:
    """task set -> task -> attempt number -> 1.0/0.0, graded attempts of one validation. A verl run's
    validation has no results.jsonl: its step's summary.json lists the trials with their seeded attempt
    numbers (a run from before verl's validation was seeded: numbered in order per task, pairing nothing)."""
    from rlkit.rollout.passes import read_results

    out: dict[str, dict[str, dict[int, float]]] = {name: {} for name in [*SETS, *sources.values()]}
    if not results.is_file() and (results.parent / "summary.json").is_file():
        for trial in json.loads((results.parent / "summary.json").read_text())["sessions"]:
            if not trial["masked"]:
                tasks = out[sources[trial["task_id"]]].setdefault(trial["task_id"], {})
                attempt = trial.get("attempt")
                tasks[len(tasks) if attempt is None else int(attempt)] = 1.0 if trial["reward"] >= 1.0 else 0.0
        return out
    for r in read_results(results):
        if r.graded and r.attempt is not None:
            out[sources[r.task_id]].setdefault(r.task_id, {})[r.attempt] = 1.0 if r.passed else 0.0
    return out


def rewards_per_step(jsonl: Path) -> dict[int, float]:
    out = {}
    for line in jsonl.read_text().splitlines():
        record = json.loads(line)
        value = record.get("data", {}).get("critic/rewards/mean")
        if record.get("step", 0) > 0 and value is not None:
            out[int(record["step"])] = float(value)
    return out


def temperature_control(out: Path, seed: int, temperature: str, args: argparse.Namespace, model: Path,
                        val_index: Path, tag: str = "", folder: str = "temperature") -> Path:
    """A policy's validation attempts at another temperature: `rlkit eval` with the rl run's config and
    seed, so attempt j of task t is drawn as validation draws it. The warm start by default; with a tag,
    the policy of that run's last step (merged from its checkpoint). Skipped when done; its results file."""
    name = f"{tag + '-' if tag else ''}t{temperature}-s{seed}"
    out_dir = out / folder / name
    results = out_dir / "results.jsonl"
    if (out_dir / "eval_results.json").is_file():
        return results
    # its own config file: the rl run's (configs/rl-s<seed>.env) stays the record of what trained
    config = run_config(out, f"{folder}-{name}", seed, args, model, val_index, "0")
    log = out / "logs" / f"{folder}-{name}.out" if folder != "temperature" else out / "logs" / f"{name}.out"
    print(f"… {tag or 'warm start'} at temperature {temperature}, seed {seed} (log {log})", flush=True)
    with log.open("w") as sink:
        proc = subprocess.run([*RLKIT, "eval", str(model), str(val_index), "-k", str(args.val_n), "--config",
                               str(config), "--temperature", temperature, "--seed", str(seed), "-o", str(out_dir),
                               "--project", f"learning-{folder}", "--experiment", name],
                              cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"temperature control {name} failed (exit {proc.returncode}); see {log}")
    return results


def family_index(out: Path, family: Path) -> Path:
    """Held-out family members of the train tasks (the same code, other constants and graded data; never
    trained on) as one index whose rows' data_source is `family`; their images built (cached)."""
    from rlkit.tasks.index import build_rows, write_index

    sh([*RLKIT, "images", "build", str(family)])
    rows = [r.model_copy(update={"data_source": "family"}) for r in build_rows(family, "val")]
    return write_index(rows, out / "family.parquet")


def family_rows(out: Path, seeds: list[int], temps: list[str], family: Path, summary: dict[str, Any],
                args: argparse.Namespace) -> list[str]:
    """The warm start and the rl arm's last policy on the held-out family members, the same seeded attempts
    at each temperature: the gain at each, and each side at its best temperature."""
    from rlkit.rollout.passk import paired_gain_interval, pass1, pass1_interval
    from rlkit.tasks.index import load_index

    sources = {r.task_id: "family" for r in load_index(out / "family.parquet")}
    lines = ["", (f"Held-out family members ({family.name}: the train tasks' code with other constants and graded "
                  "data, never trained on), the same seeded attempts:"), "",
             "| temperature | warm start pass@1 | rl after pass@1 | rl - warm start |", "|---|---|---|---|"]
    warm, rl = {}, {}
    for temperature in ["1.0", *temps]:
        warm[temperature], rl[temperature] = ({f"s{seed}": passes(out / "family" / f"{side}-t{temperature}-s{seed}"
                                                                  / "results.jsonl", sources)["family"] for seed in seeds}
                                              for side in ("warm", "rl"))
        row = {"warm": pass1_interval(warm[temperature], reps=args.reps), "rl": pass1_interval(rl[temperature], reps=args.reps),
               "gain": paired_gain_interval(warm[temperature], rl[temperature], reps=args.reps)}
        summary[f"family/{temperature}"] = row
        lines.append(f"| {temperature} | {level(row['warm'])} | {level(row['rl'])} | {fmt(row['gain'])} |")
    best, rl_best = (max(side, key=lambda t: pass1(side[t]) or 0.0) for side in (warm, rl))
    gain = paired_gain_interval(warm[best], rl[rl_best], reps=args.reps)
    summary["rl_best_beyond_temperature/family"] = {"gain": gain, "temperature": rl_best,
                                                    "warm_start_temperature": best}
    lines.append(f"| rl at {rl_best} (its best) - warm start at {best} (its best) | | | {fmt(gain)} |")
    return lines


def trained_policy(out: Path, exp: str, steps: int) -> Path:
    """The run's last-step policy as a Hugging Face folder in the dtype it trained and was validated in.

    `rlkit ckpt merge --keep-dtype`: verl's merger alone writes bf16, and the embedded run trains and serves
    float32; rounding its weights to bf16 (up to 4e-3 here) is enough to change greedy choices, so the policy
    would not be the one validated."""
    step_dir = out / "runs" / "checkpoints" / "embedded" / exp / f"global_step_{steps}"
    target = step_dir / "policy_hf"
    if not (target / "config.json").is_file():
        sh([*RLKIT, "ckpt", "merge", str(step_dir), "-o", str(target), "--keep-dtype"], stdout=subprocess.DEVNULL)
    return target


def weights_change(policy: Path, start: Path) -> float:
    """The largest absolute difference between two HF folders' weights: 0.0 for a control whose update was off."""
    from safetensors.torch import load_file

    after, before = load_file(str(policy / "model.safetensors")), load_file(str(start / "model.safetensors"))
    if set(after) != set(before):
        raise SystemExit(f"{policy} and {start} hold different tensors")
    return max(float((after[k].float() - before[k].float()).abs().max()) for k in after)


def fmt(interval: tuple[float | None, float | None, float | None]) -> str:
    point, low, high = interval
    return "n/a" if point is None else f"{point:+.3f} [{low:+.3f}, {high:+.3f}]"


def level(interval: tuple[float | None, float | None, float | None]) -> str:
    point, low, high = interval
    return "n/a" if point is None else f"{point:.3f} [{low:.3f}, {high:.3f}]"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in report["runs"]:
        steps = sorted(run["reward_per_step"], key=int)
        ax.plot([int(s) for s in steps], [run["reward_per_step"][s] for s in steps],
                linestyle="-" if run["arm"] == "rl" else "--", marker="o", markersize=3,
                label=f"{run['arm']} seed {run['seed']}")
    ax.set_xlabel("training step")
    ax.set_ylabel("reward mean (train trials)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Embedded run: reward per step, RL vs control (LR 0)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def temperature_rows(out: Path, seeds: list[int], temps: list[str], by_arm: dict[str, Any],
                     sources: dict[str, str], summary: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The warm start's pass@1 at each temperature, and RL's pass@1 after training beyond the best of them."""
    from rlkit.rollout.passk import paired_gain_interval, pass1, pass1_interval

    lines = ["", ("Temperature control: the warm start at each temperature, the same seeded attempts "
             "(1.0 is the rl arm's step-0 validation):"), "",
             "| temperature | task set | warm start pass@1 |", "|---|---|---|"]
    for name in SETS:
        at: dict[str, dict[str, dict[str, dict[int, float]]]] = {"1.0": by_arm["rl"]["before"][name]}
        for temperature in temps:
            at[temperature] = {f"rl-s{seed}": passes(out / "temperature" / f"t{temperature}-s{seed}" / "results.jsonl",
                                                     sources)[name] for seed in seeds}
        for temperature, groups in at.items():
            row = pass1_interval(groups, reps=args.reps)
            summary[f"temperature/{temperature}/{name}"] = {"pass1": row}
            lines.append(f"| {temperature} | {name} | {level(row)} |")
        best = max(at, key=lambda t: pass1(at[t]) or 0.0)
        gain = paired_gain_interval(at[best], by_arm["rl"]["after"][name], reps=args.reps)
        summary[f"rl_beyond_temperature/{name}"] = {"gain": gain, "temperature": best}
        lines.append(f"| rl after - warm start at {best} (the best) | {name} | {fmt(gain)} |")
        # The trained policy at each temperature too: both sides at their best temperature, the same attempts.
        after_at = {"1.0": by_arm["rl"]["after"][name]}
        for temperature in temps:
            if all((out / "temperature" / f"rl-t{temperature}-s{seed}" / "results.jsonl").is_file() for seed in seeds):
                after_at[temperature] = {f"rl-s{seed}": passes(out / "temperature" / f"rl-t{temperature}-s{seed}"
                                                               / "results.jsonl", sources)[name] for seed in seeds}
        for temperature, groups in after_at.items():
            if temperature == "1.0":
                continue
            row = {"pass1": pass1_interval(groups, reps=args.reps),
                   "gain": paired_gain_interval(at[temperature], groups, reps=args.reps)}
            summary[f"rl_at_temperature/{temperature}/{name}"] = row
            lines.append(f"| rl after at {temperature} - warm start at {temperature} | {name} | {fmt(row['gain'])} |")
        rl_best = max(after_at, key=lambda t: pass1(after_at[t]) or 0.0)
        gain = paired_gain_interval(at[best], after_at[rl_best], reps=args.reps)
        summary[f"rl_best_beyond_temperature/{name}"] = {"gain": gain, "temperature": rl_best,
                                                        "warm_start_temperature": best}
        lines.append(f"| rl after at {rl_best} (its best) - warm start at {best} (its best) | {name} | {fmt(gain)} |")
    return lines


def pass1_by_step(out: Path, exps: list[str], name: str, sources: dict[str, str]) -> list[tuple[int, float]]:
    """Pass@1 on one task set at each step every run in `exps` validated (--val-freq), attempts pooled."""
    folders = [val_dir(out, exp, 0).parent for exp in exps]
    found = [{int(d.name.removeprefix("step_")) for d in f.glob("step_*") if (d / "results.jsonl").is_file()}
             for f in folders]
    rows = []
    for step in sorted(set.intersection(*found)) if found else []:
        values = [v for f in folders for task in passes(f / f"step_{step}" / "results.jsonl", sources)[name].values()
                  for v in task.values()]
        if values:
            rows.append((step, sum(values) / len(values)))
    return rows


def sweep_rows(out: Path, seeds: list[int], sweep: list[str], lr: str, sources: dict[str, str],
               summary: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The rl arm at larger LRs: its gain, and whether it ends no lower than the control's interval allows."""
    from rlkit.rollout.passk import paired_gain_interval

    if not sweep:
        return []
    lines = ["", (f"LR sweep ({args.steps} steps): holds = gains, or loses no more than the control's 95% "
             "interval reaches below zero"), "",
             "| LR | task set | gain | control's gain | holds | pass@1 by validated step |", "|---|---|---|---|---|---|"]
    for multiple in sweep:
        sweep_lr = f"{float(lr) * float(multiple):g}"
        for name in SETS:
            before, after = {}, {}
            for seed in seeds:
                exp = f"rl-x{multiple}-s{seed}"
                before[exp] = passes(val_dir(out, exp, 0) / "results.jsonl", sources)[name]
                after[exp] = passes(val_dir(out, exp, args.steps) / "results.jsonl", sources)[name]
            gain = paired_gain_interval(before, after, reps=args.reps)
            control = summary.get(f"control/{name}", {}).get("gain", (None, None, None))
            # without the control (--arms ''): a fall below zero cannot be told from noise; say so, not "yes"
            holds = None if control[1] is None else gain[0] is not None and gain[0] >= min(0.0, control[1])
            summary[f"lr_sweep/x{multiple}/{name}"] = {"gain": gain, "lr": sweep_lr, "holds": holds}
            verdict = "n/a (no control)" if holds is None else "yes" if holds else "NO"
            path = " -> ".join(f"{step}: {value:.3f}" for step, value in
                               pass1_by_step(out, [f"rl-x{multiple}-s{seed}" for seed in seeds], name, sources))
            lines.append(f"| {sweep_lr} (x{multiple}) | {name} | {fmt(gain)} | {fmt(control)} | {verdict} | {path} |")
    return lines


def control_weights_line(change: dict[str, float], steps: int) -> str:
    """Whether the LR-0 controls stayed the warm start: each one's largest change of any weight."""
    return (f"Control runs, the largest change of any weight after {steps} steps: "
            + ", ".join(f"{exp} {value:g}" for exp, value in change.items())
            + (" (the warm start's weights, bit for bit)" if not any(change.values()) else " (NOT a control)"))


def run_record(out: Path, exp: str) -> dict[str, Any]:
    """One finished run's name, wall seconds (None if unknown) and reward per step."""
    wall_file = out / "runs" / f"{exp}.wall"
    return {"exp": exp, "wall_s": float(wall_file.read_text()) if wall_file.is_file() else None,
            "reward_per_step": rewards_per_step(out / "runs" / "logs" / f"{exp}.jsonl")}


def reward_table(runs: list[dict[str, Any]]) -> list[str]:
    """The reward per training step of each run, one row a run, with its wall time."""
    steps = sorted({int(s) for run in runs for s in run["reward_per_step"]})
    lines = ["", "Reward per training step (critic/rewards/mean over the step's graded trials):", "",
             "| run | " + " | ".join(str(s) for s in steps) + " | wall |", "|---|" + "---|" * (len(steps) + 1)]
    for run in runs:
        values = " | ".join(f"{run['reward_per_step'].get(s, float('nan')):.2f}" for s in steps)
        wall = f"{run['wall_s'] / 60:.1f} min" if run["wall_s"] else "n/a"
        lines.append(f"| {run['exp']} | {values} | {wall} |")
    return lines


def sweep_report(out: Path, seeds: list[int], sweep: list[str], lr: str, sources: dict[str, str], control: bool,
                 control_steps: int, model: Path, args: argparse.Namespace, started: float) -> int:
    """The LR sweep without the rl arm at the default LR (`--arms control --lr-sweep 3,10`): each sweep run's
    gain, judged against the LR-0 control's interval when the control ran, whether `rlkit status` names a
    collapse in it, and its reward per step; into <out>/learning-sweep.json."""
    from rlkit.rollout.passk import paired_gain_interval

    summary: dict[str, Any] = {}
    lines = [f"# LR sweep: {len(seeds)} seed(s) x {args.steps} steps at {', '.join(f'x{m}' for m in sweep)} of "
             f"LR {lr}" + (f", beside an LR-0 control ({control_steps} steps)" if control else ", no control"), ""]
    exps = [f"rl-x{m}-s{seed}" for m in sweep for seed in seeds]
    if control:
        controls = [f"control-s{seed}" for seed in seeds]
        for name in SETS:
            before = {e: passes(val_dir(out, e, 0) / "results.jsonl", sources)[name] for e in controls}
            after = {e: passes(val_dir(out, e, control_steps) / "results.jsonl", sources)[name] for e in controls}
            summary[f"control/{name}"] = {"gain": paired_gain_interval(before, after, reps=args.reps)}
        change = {e: weights_change(trained_policy(out, e, control_steps), model) for e in controls}
        summary["control_weights_change"] = change
        lines.append(control_weights_line(change, control_steps))
        exps = controls + exps
    lines += sweep_rows(out, seeds, sweep, lr, sources, summary, args)
    runs = [run_record(out, exp) for exp in exps]
    lines += reward_table(runs)
    report: dict[str, Any] = {"seeds": seeds, "steps": args.steps, "lr": lr, "sweep": sweep, "summary": summary,
                              "runs": runs, "bench_wall_s": time.perf_counter() - started}
    lines += collapse_lines(out, exps, report)
    text = "\n".join(lines)
    print(text)
    report["printed"] = text
    (out / "learning-sweep.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


def collapse_lines(out: Path, exps: list[str], report: dict[str, Any]) -> list[str]:
    """What `rlkit status` names for each run: a collapse in progress (rlkit.monitor.collapse) over its last steps,
    or none; into report["collapse"] by run."""
    from rlkit.config.paths import RunPaths
    from rlkit.monitor.status import collapse_of

    lines = ["", "Collapse named by `rlkit status` (rlkit.monitor.collapse) at each run's last step:", ""]
    found = {exp: collapse_of(RunPaths(out / "runs", "embedded", exp)) for exp in exps}
    report["collapse"] = {exp: f.as_dict() if f else None for exp, f in found.items()}
    for exp, f in found.items():
        lines.append(f"- {exp}: " + (f"{f.headline.removeprefix('collapse: ')}: {f.numbers}" if f else "none"))
    return lines


def verl_arm(out: Path, seeds: list[int], lr: str, model: Path, val_index: Path, sources: dict[str, str],
             args: argparse.Namespace) -> int:
    """The rl arm through TRAINER=verl (embedded-verl.env with the rl arm's keys): its gain per task set beside
    the local rl arm's of the same seeds (when run into the same --out). verl's validation attempts are seeded
    as the local trainer's (SEED, task, attempt), so its before and after pair; into <out>/learning-verl.json."""
    from rlkit.rollout.passk import paired_gain_interval, pass1_interval

    for seed in seeds:
        train(out, f"verl-rl-s{seed}", seed, args, model, val_index, lr, VERL_CONFIG)
    lines = [(f"# Learning through TRAINER=verl: {len(seeds)} seed(s) x {args.steps} steps, LR {lr}, validation "
             f"{args.val_n} seeded attempts per task, paired before/after; the local rl arm beside it"), "",
             "| trainer | task set | pass@1 before | pass@1 after | gain |", "|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for trainer, prefix in (("verl", "verl-rl"), ("local", "rl")):
        exps = [f"{prefix}-s{seed}" for seed in seeds]
        if not all((val_dir(out, e, args.steps) / "summary.json").is_file() for e in exps):
            continue
        for name in SETS:
            b = {e: passes(val_dir(out, e, 0) / "results.jsonl", sources)[name] for e in exps}
            a = {e: passes(val_dir(out, e, args.steps) / "results.jsonl", sources)[name] for e in exps}
            row = {"before": pass1_interval(b, reps=args.reps), "after": pass1_interval(a, reps=args.reps),
                   "gain": paired_gain_interval(b, a, reps=args.reps)}
            summary[f"{trainer}/rl/{name}"] = row
            lines.append(f"| {trainer} | {name} | {level(row['before'])} | {level(row['after'])} | {fmt(row['gain'])} |")
    text = "\n".join(lines)
    print(text)
    (out / "learning-verl.json").write_text(json.dumps({"seeds": seeds, "steps": args.steps, "lr": lr,
                                                         "summary": summary, "printed": text}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=12,
                        help="steps per run (12: measured beside 8 and 16; bench/README.md)")
    parser.add_argument("--val-freq", type=int, default=0,
                        help="validate every N steps too (default: only before and after)")
    parser.add_argument("--val-n", type=int, default=8, help="validation attempts per task (both task sets)")
    parser.add_argument("--lr", default=None, help="the rl arm's LR (default: the embedded config's)")
    parser.add_argument("--out", type=Path, default=ROOT / ".rlkit" / "bench" / "learning")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap draws")
    parser.add_argument("--arms", default=",".join(ARMS), help="rl,control (default both; one alone only runs)")
    parser.add_argument("--temps", default="0.6,0",
                        help="the warm start's other temperatures for the temperature control ('' for none)")
    parser.add_argument("--trainer", choices=("local", "verl"), default="local",
                        help="verl: the rl arm through embedded-verl.env (verl's main_ppo) beside the local one")
    parser.add_argument("--control-steps", type=int, default=None,
                        help="the control arm's steps (default --steps). Its weights never change (checked: "
                             "control_weights_change in the summary), so its last validation is any step's")
    parser.add_argument("--family", default="examples/heldout-family",
                        help="held-out family members of the train tasks: the warm start and the rl arm's last "
                             "policy evaluated on them at 1.0 and --temps ('' for none)")
    parser.add_argument("--family-temps", default=None,
                        help="the temperatures besides 1.0 for the held-out family (default: --temps)")
    parser.add_argument("--lr-sweep", default="", help="multiples of the rl arm's LR to train too, e.g. 3,10")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another key of both arms' config (e.g. MINI_BSZ=1); repeatable")
    args = parser.parse_args(argv)
    args.set = with_proxy_port(args.set)
    from rlkit.config.resolve import resolve
    from rlkit.rollout.passk import paired_gain_interval, pass1_interval
    from rlkit.tasks.index import load_index

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    lr = args.lr or str(resolve(CONFIG).config.LR)
    model, val_index = prepare(out)
    sources = {r.task_id: next(k for k, v in SETS.items() if v == r.data_source) for r in load_index(val_index)}
    started = time.perf_counter()
    if args.trainer == "verl":
        return verl_arm(out, seeds, lr, model, val_index, sources, args)
    arms = [a for a in ARMS if a in args.arms.split(",")]
    sweep = [m for m in args.lr_sweep.split(",") if m]
    temps = [t for t in args.temps.split(",") if t]
    family = (ROOT / args.family).resolve() if args.family else None
    family_temps = temps if args.family_temps is None else [t for t in args.family_temps.split(",") if t]
    arm_steps = {"rl": args.steps, "control": args.control_steps or args.steps}
    for seed in seeds:
        for arm in arms:
            train(out, f"{arm}-s{seed}", seed, args, model, val_index, lr if arm == "rl" else "0",
                  steps=arm_steps[arm])
        for multiple in sweep:
            train(out, f"rl-x{multiple}-s{seed}", seed, args, model, val_index, f"{float(lr) * float(multiple):g}")
        for temperature in temps:
            temperature_control(out, seed, temperature, args, model, val_index)
            if "rl" in arms:  # the trained policy at the same temperature: what RL adds beyond sharpening
                temperature_control(out, seed, temperature, args, trained_policy(out, f"rl-s{seed}", args.steps),
                                    val_index, tag="rl")
        if family and "rl" in arms:  # held-out family members: the warm start and the trained policy alike
            index = family_index(out, family)
            for temperature in ["1.0", *family_temps]:
                temperature_control(out, seed, temperature, args, model, index, tag="warm", folder="family")
                temperature_control(out, seed, temperature, args, trained_policy(out, f"rl-s{seed}", args.steps),
                                    index, tag="rl", folder="family")
    if arms != list(ARMS):
        if sweep:  # a stability run: the sweep judged against the control when it ran (--arms control)
            return sweep_report(out, seeds, sweep, lr, sources, "control" in arms, arm_steps["control"], model,
                                args, started)
        print(f"ran {', '.join(arms) or 'the sweep'} only: no comparison with the control")
        return 0

    runs, by_arm = [], {arm: {"before": {s: {} for s in SETS}, "after": {s: {} for s in SETS}} for arm in ARMS}
    for seed in seeds:
        for arm in ARMS:
            exp = f"{arm}-s{seed}"
            before = passes(val_dir(out, exp, 0) / "results.jsonl", sources)
            after = passes(val_dir(out, exp, arm_steps[arm]) / "results.jsonl", sources)
            for name in SETS:
                by_arm[arm]["before"][name][exp] = before[name]
                by_arm[arm]["after"][name][exp] = after[name]
            runs.append({"arm": arm, "seed": seed, **run_record(out, exp)})

    control_note = f" ({arm_steps['control']} steps)" if arm_steps["control"] != args.steps else ""
    title = (f"# Learning: {len(seeds)} seeds x {args.steps} steps of the embedded default (LR {lr}) vs a "
             f"control (LR 0{control_note}) and the warm start at temperatures {', '.join(['1.0', *temps])}; validation {args.val_n} seeded attempts per task, paired before/after; "
             f"95% bootstrap over seeds, tasks and attempts")
    lines = [title, "",
             "| arm | task set | pass@1 before | pass@1 after | gain (after - before) |", "|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for arm in ARMS:
        for name in SETS:
            b, a = by_arm[arm]["before"][name], by_arm[arm]["after"][name]
            row = {"before": pass1_interval(b, reps=args.reps), "after": pass1_interval(a, reps=args.reps),
                   "gain": paired_gain_interval(b, a, reps=args.reps)}
            summary[f"{arm}/{name}"] = row
            lines.append(f"| {arm} | {name} | {level(row['before'])} | {level(row['after'])} | {fmt(row['gain'])} |")
    # RL beyond the control: per seed, (rl after - rl before) - (control after - control before); the two
    # arms of a seed are resampled together (their tasks and attempt numbers are the same).
    for name in SETS:
        beyond: dict[str, dict[str, dict[int, float]]] = {}
        for seed in seeds:
            rl_b, rl_a = by_arm["rl"]["before"][name][f"rl-s{seed}"], by_arm["rl"]["after"][name][f"rl-s{seed}"]
            c_b = by_arm["control"]["before"][name][f"control-s{seed}"]
            c_a = by_arm["control"]["after"][name][f"control-s{seed}"]
            for task in rl_b:
                keys = set(rl_b[task]) & set(rl_a.get(task, {})) & set(c_b.get(task, {})) & set(c_a.get(task, {}))
                if keys:
                    beyond.setdefault(f"s{seed}", {})[task] = {
                        j: (rl_a[task][j] - rl_b[task][j]) - (c_a[task][j] - c_b[task][j]) for j in keys}
        row = pass1_interval(beyond, reps=args.reps)
        summary[f"rl_beyond_control/{name}"] = {"gain": row}
        lines.append(f"| rl - control | {name} | | | {fmt(row)} |")
    # The control is a control only if its update did nothing: its last policy against the warm start.
    change = {f"control-s{seed}": weights_change(trained_policy(out, f"control-s{seed}", arm_steps["control"]), model)
              for seed in seeds}
    summary["control_weights_change"] = change
    lines += ["", control_weights_line(change, arm_steps["control"])]
    lines += temperature_rows(out, seeds, temps, by_arm, sources, summary, args)
    if family:
        lines += family_rows(out, seeds, family_temps, family, summary, args)
    lines += sweep_rows(out, seeds, sweep, lr, sources, summary, args)

    lines += reward_table(runs)
    png = out / "reward_per_step.png"
    report = {"seeds": seeds, "steps": args.steps, "val_n": args.val_n, "lr": lr, "set": args.set, "summary": summary,
              "runs": runs, "plot": str(png), "bench_wall_s": time.perf_counter() - started}
    lines += collapse_lines(out, [run["exp"] for run in runs]
                            + [f"rl-x{m}-s{seed}" for m in sweep for seed in seeds], report)
    plot(report, png)
    lines += ["", f"plot: {png}", f"bench wall: {report['bench_wall_s'] / 60:.1f} min (runs skipped when done)"]
    text = "\n".join(lines)
    print(text)
    report["printed"] = text
    (out / "learning.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
