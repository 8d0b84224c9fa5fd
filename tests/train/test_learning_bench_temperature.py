"""bench/learning.py's temperature control: the warm start's best temperature against RL's pass@1 after, and the
trained policy judged at the same temperatures (both sides at their best)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.fixtures.scripts import load_script

SOURCES = {"lru-cache-recency": "train", "calc-power-unary": "heldout"}  # task -> set


def write_results(folder: Path, rewards: dict[str, list[float]]) -> Path:
    folder.mkdir(parents=True)
    lines = [{"task_id": t, "session": f"{t}__{i}", "outcome": "passed" if r else "failed_tests", "reward": r,
              "attempts": 1, "trial_dir": str(folder), "attempt": i} for t, rs in rewards.items() for i, r in enumerate(rs)]
    (folder / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder / "results.jsonl"


def test_rl_is_judged_beyond_the_warm_starts_best_temperature_and_at_that_temperature_itself(tmp_path: Path) -> None:
    learning = load_script("bench/learning.py")
    held = {"calc-power-unary": [0.0] * 4}
    # warm start: 1 of 4 at 1.0, 2 of 4 greedy (the best); rl after: 2 of 4 at 1.0, 4 of 4 greedy
    before = learning.passes(write_results(tmp_path / "v0", {"lru-cache-recency": [1, 0, 0, 0], **held}), SOURCES)
    after = learning.passes(write_results(tmp_path / "v8", {"lru-cache-recency": [1, 1, 0, 0], **held}), SOURCES)
    write_results(tmp_path / "temperature" / "t0-s0", {"lru-cache-recency": [1, 1, 0, 0], **held})
    write_results(tmp_path / "temperature" / "rl-t0-s0", {"lru-cache-recency": [1, 1, 1, 1], **held})
    by_arm = {"rl": {"before": {s: {"rl-s0": before[s]} for s in before}, "after": {s: {"rl-s0": after[s]} for s in after}}}
    summary: dict = {}
    lines = learning.temperature_rows(tmp_path, [0], ["0"], by_arm, SOURCES, summary, argparse.Namespace(reps=200))
    assert summary["temperature/0/train"]["pass1"][0] == 0.5
    assert summary["rl_beyond_temperature/train"]["temperature"] == "0"
    assert summary["rl_beyond_temperature/train"]["gain"][0] == 0.0  # 0.5 at 1.0 against the start's greedy 0.5
    assert summary["rl_at_temperature/0/train"]["gain"][0] == 0.5  # greedy 0.5 -> 1.0: the same attempts
    best = summary["rl_best_beyond_temperature/train"]
    assert best["gain"][0] == 0.5 and best["temperature"] == "0" and best["warm_start_temperature"] == "0"
    assert any("rl after at 0 (its best) - warm start at 0 (its best)" in line for line in lines)


def test_without_the_trained_policys_evaluations_only_the_warm_starts_rows_are_written(tmp_path: Path) -> None:
    learning = load_script("bench/learning.py")
    rows = {"lru-cache-recency": [1, 0, 0, 0], "calc-power-unary": [0.0] * 4}
    res = learning.passes(write_results(tmp_path / "v", rows), SOURCES)
    write_results(tmp_path / "temperature" / "t0-s0", rows)
    by_arm = {"rl": {"before": {s: {"rl-s0": res[s]} for s in res}, "after": {s: {"rl-s0": res[s]} for s in res}}}
    summary: dict = {}
    learning.temperature_rows(tmp_path, [0], ["0"], by_arm, SOURCES, summary, argparse.Namespace(reps=200))
    assert "rl_at_temperature/0/train" not in summary
    assert summary["rl_best_beyond_temperature/train"]["temperature"] == "1.0"


def test_the_lr_sweep_reads_without_the_control_and_says_it_cannot_judge(tmp_path: Path) -> None:
    """--arms '' --lr-sweep 10: each sweep run's gain from its own validations; "holds" needs the control."""
    learning = load_script("bench/learning.py")
    held = {"calc-power-unary": [0.0] * 4}
    trials = tmp_path / "runs" / "harbor_trials" / "embedded"
    write_results(trials / "rl-x10-s0_val" / "step_0", {"lru-cache-recency": [1, 1, 0, 0], **held})
    write_results(trials / "rl-x10-s0_val" / "step_16", {"lru-cache-recency": [0, 0, 0, 0], **held})
    summary: dict = {}
    lines = learning.sweep_rows(tmp_path, [0], ["10"], "3e-4", SOURCES, summary,
                                argparse.Namespace(reps=200, steps=16))
    row = summary["lr_sweep/x10/train"]
    assert row["gain"][0] == -0.5 and row["lr"] == "0.003" and row["holds"] is None
    assert any(line.startswith("| 0.003 (x10) | train | -0.500") and "n/a (no control)" in line for line in lines)
    summary["control/train"] = {"gain": (0.0, -0.1, 0.1)}
    learning.sweep_rows(tmp_path, [0], ["10"], "3e-4", SOURCES, summary, argparse.Namespace(reps=200, steps=16))
    assert summary["lr_sweep/x10/train"]["holds"] is False


def test_each_bench_process_takes_a_free_proxy_port_unless_one_is_set(tmp_path: Path) -> None:
    """Seeds run as parallel bench processes must not share the config's fixed PROXY_PORT (✗ FATAL ports)."""
    import socket

    learning = load_script("bench/learning.py")
    assert learning.with_proxy_port(["MINI_BSZ=1", "PROXY_PORT=8013"]) == ["MINI_BSZ=1", "PROXY_PORT=8013"]
    sets = learning.with_proxy_port(["MINI_BSZ=1"])
    assert sets[0] == "MINI_BSZ=1" and sets[1].startswith("PROXY_PORT=")
    port = int(sets[1].split("=", 1)[1])
    with socket.socket() as probe:  # free: a proxy can bind it
        probe.bind(("127.0.0.1", port))
    args = argparse.Namespace(set=sets, val_n=8, steps=8, val_freq=0)
    config = learning.run_config(tmp_path, "rl-s0", 0, args, tmp_path / "model", tmp_path / "val.parquet", "3e-4")
    assert f"PROXY_PORT={port}" in config.read_text().splitlines()


def test_a_control_is_checked_to_keep_the_warm_starts_weights_and_may_run_fewer_steps(tmp_path: Path) -> None:
    """--control-steps: an LR-0 control's weights never change, so the bench reads its last validation at its own
    step count and says, from the merged weights, whether it really stayed the warm start (max change 0)."""
    import torch
    from safetensors.torch import save_file

    learning = load_script("bench/learning.py")
    start, same, moved = tmp_path / "start", tmp_path / "same", tmp_path / "moved"
    weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}
    for folder, delta in ((start, 0.0), (same, 0.0), (moved, 0.25)):
        folder.mkdir()
        save_file({k: v + delta * (k == "w") for k, v in weights.items()}, str(folder / "model.safetensors"))
    assert learning.weights_change(same, start) == 0.0
    assert learning.weights_change(moved, start) == 0.25
    args = argparse.Namespace(set=["PROXY_PORT=8013"], val_n=8, steps=16, val_freq=0)
    lines = learning.run_config(tmp_path, "control-s0", 0, args, start, tmp_path / "v.parquet", "0", steps=8)
    keys = dict(line.split("=", 1) for line in lines.read_text().splitlines() if "=" in line and line[0] != "#")
    assert (keys["TOTAL_STEPS"], keys["TRAINER_SAVE_FREQ"], keys["TRAINER_TEST_FREQ"], keys["LR"]) == ("8", "8", "8", "0")


def test_held_out_family_members_are_read_for_both_sides_at_each_temperature(tmp_path: Path) -> None:
    """--family: the warm start and the trained policy on the held-out family members, paired attempts at each
    temperature, and each side at its best temperature."""
    import shutil

    from rlkit.tasks.index import build_rows, write_index

    learning = load_script("bench/learning.py")
    family = tmp_path / "heldout-family"
    shutil.copytree(Path("examples/tasks/merge-intervals"), family / "merge-intervals-b")
    write_index([r.model_copy(update={"data_source": "family"}) for r in build_rows(family, "val")],
                tmp_path / "family.parquet")
    task = "merge-intervals-b"
    for side, temperature, rewards in (("warm", "1.0", [1, 0, 0, 0]), ("rl", "1.0", [1, 1, 0, 0]),
                                       ("warm", "0", [0, 0, 0, 0]), ("rl", "0", [1, 1, 1, 1])):
        write_results(tmp_path / "family" / f"{side}-t{temperature}-s0", {task: rewards})
    summary: dict = {}
    lines = learning.family_rows(tmp_path, [0], ["0"], family, summary, argparse.Namespace(reps=200))
    assert summary["family/1.0"]["gain"][0] == 0.25 and summary["family/0"]["gain"][0] == 1.0
    best = summary["rl_best_beyond_temperature/family"]
    assert (best["gain"][0], best["temperature"], best["warm_start_temperature"]) == (0.75, "0", "1.0")
    assert any(line.startswith("| 0 | 0.000") and "1.000" in line for line in lines)


def test_the_trained_policy_is_judged_in_the_dtype_it_trained_in_not_the_mergers_bf16(tiny_model_dir: Path,
                                                                                        tmp_path: Path) -> None:
    """verl's merger writes bf16; the embedded run trains and serves float32, and the rounding is as large as
    an 8-16 step RL update. The bench's policy folder (`rlkit ckpt merge --keep-dtype`) holds the trainer's
    own float32 weights, from a checkpoint the embedded trainer's code saved."""
    import torch
    from safetensors.torch import load_file

    from rlkit.train.checkpoint import save_checkpoint
    from tests.train.test_checkpoint import trained

    learning = load_script("bench/learning.py")
    updater = trained(tiny_model_dir, steps=1)
    save_checkpoint(tmp_path / "runs" / "checkpoints" / "embedded" / "rl-s0", 16, updater, {"step": 16})
    policy = learning.trained_policy(tmp_path, "rl-s0", 16)
    assert policy.name == "policy_hf" and (policy / "tokenizer.json").is_file()
    held = {}
    for file in policy.glob("*.safetensors"):
        held.update(load_file(file))
    for key, value in updater.full_state_dict().items():
        assert held[key].dtype == torch.float32 and torch.equal(held[key], value), key  # bf16 would round them
    assert json.loads((policy / "config.json").read_text())["dtype"] == "float32"
    assert learning.trained_policy(tmp_path, "rl-s0", 16) == policy  # cached


def test_the_lr_sweep_beside_a_control_alone_is_judged_against_it_and_reads_every_validated_step(
        tmp_path: Path, monkeypatch) -> None:
    """--arms control --lr-sweep 10 --val-freq 8: no 16-step rl arm at the default LR is needed to say whether x10
    holds; the control's interval judges it, and the sweep's table reads steps 0, 8 and 16."""
    learning = load_script("bench/learning.py")
    held = {"calc-power-unary": [0.0] * 4}
    trials = tmp_path / "runs" / "harbor_trials" / "embedded"
    write_results(trials / "control-s0_val" / "step_0", {"lru-cache-recency": [1, 0, 1, 0], **held})
    write_results(trials / "control-s0_val" / "step_8", {"lru-cache-recency": [1, 0, 1, 0], **held})
    for step, rewards in ((0, [1, 1, 0, 0]), (8, [1, 0, 0, 0]), (16, [0, 0, 0, 0])):
        write_results(trials / "rl-x10-s0_val" / f"step_{step}", {"lru-cache-recency": rewards, **held})
    logs = tmp_path / "runs" / "logs"
    logs.mkdir(parents=True)
    (logs / "rl-x10-s0.jsonl").write_text("".join(
        json.dumps({"step": s, "data": {"critic/rewards/mean": r}}) + "\n" for s, r in ((1, 0.5), (2, 0.25))))
    (logs / "control-s0.jsonl").write_text(json.dumps({"step": 1, "data": {"critic/rewards/mean": 0.5}}) + "\n")
    monkeypatch.setattr(learning, "trained_policy", lambda out, exp, steps: tmp_path / exp)  # no checkpoint here
    monkeypatch.setattr(learning, "weights_change", lambda policy, start: 0.0)
    args = argparse.Namespace(reps=200, steps=16)
    assert learning.sweep_report(tmp_path, [0], ["10"], "3e-4", SOURCES, True, 8, tmp_path / "start", args, 0.0) == 0
    report = json.loads((tmp_path / "learning-sweep.json").read_text())
    row = report["summary"]["lr_sweep/x10/train"]
    assert row["gain"][0] == -0.5 and row["lr"] == "0.003" and row["holds"] is False
    assert report["summary"]["control/train"]["gain"][0] == 0.0
    assert report["summary"]["control_weights_change"] == {"control-s0": 0.0}
    assert "0: 0.500 -> 8: 0.250 -> 16: 0.000" in report["printed"]
    assert [run["exp"] for run in report["runs"]] == ["control-s0", "rl-x10-s0"]
    assert report["runs"][1]["reward_per_step"] == {"1": 0.5, "2": 0.25}
    assert report["collapse"] == {"control-s0": None, "rl-x10-s0": None}
