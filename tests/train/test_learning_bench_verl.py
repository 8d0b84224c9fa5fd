"""bench/learning.py --trainer verl: a verl run's validation (summary.json, no results.jsonl) read and compared."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.fixtures.scripts import load_script

SOURCES = {"lru-cache-recency": "train", "calc-power-unary": "heldout"}  # task -> set


def write_val(out: Path, exp: str, step: int, rewards: dict[str, list[float]], results: bool) -> None:
    folder = out / "runs" / "harbor_trials" / "embedded" / f"{exp}_val" / f"step_{step}"
    folder.mkdir(parents=True)
    sessions = [{"session": f"{t}__{i}", "task_id": t, "reward": r, "masked": False, "outcome": "passed" if r else
                 "failed_tests"} for t, rs in rewards.items() for i, r in enumerate(rs)]
    sessions.append({"session": "lru-cache-recency__masked", "task_id": "lru-cache-recency", "reward": 1.0,
                     "masked": True, "outcome": "sandbox_error"})
    (folder / "summary.json").write_text(json.dumps({"step": step, "sessions": sessions}))
    if results:
        lines = [{"task_id": t, "session": f"{t}__{i}", "outcome": "passed" if r else "failed_tests", "reward": r,
                  "attempts": 1, "trial_dir": str(folder), "attempt": i} for t, rs in rewards.items()
                 for i, r in enumerate(rs)]
        (folder / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_verl_runs_validation_is_read_from_its_summary_and_set_beside_the_local_arm(tmp_path: Path) -> None:
    learning = load_script("bench/learning.py")
    # verl: 1 of 4 -> 3 of 4 on the train task; 0 of 4 on the held-out one both times; the masked trial is left out
    write_val(tmp_path, "verl-rl-s0", 0, {"lru-cache-recency": [1, 0, 0, 0], "calc-power-unary": [0] * 4}, False)
    write_val(tmp_path, "verl-rl-s0", 4, {"lru-cache-recency": [1, 1, 0, 1], "calc-power-unary": [0] * 4}, False)
    # local: 2 of 4 -> 2 of 4
    write_val(tmp_path, "rl-s0", 0, {"lru-cache-recency": [1, 1, 0, 0], "calc-power-unary": [0] * 4}, True)
    write_val(tmp_path, "rl-s0", 4, {"lru-cache-recency": [0, 1, 1, 0], "calc-power-unary": [0] * 4}, True)
    run = tmp_path / "runs" / "harbor_trials" / "embedded" / "verl-rl-s0_val" / "step_4"
    assert learning.passes(run / "results.jsonl", SOURCES)["train"] == {"lru-cache-recency": {0: 1.0, 1: 1.0, 2: 0.0,
                                                                                                3: 1.0}}
    args = argparse.Namespace(steps=4, reps=200, val_n=4)
    learning.train = lambda *a, **k: None  # both runs are on disk: nothing to train
    assert learning.verl_arm(tmp_path, [0], "3e-4", tmp_path, tmp_path, SOURCES, args) == 0
    summary = json.loads((tmp_path / "learning-verl.json").read_text())["summary"]
    assert summary["verl/rl/train"]["before"][0] == 0.25 and summary["verl/rl/train"]["after"][0] == 0.75
    assert summary["verl/rl/train"]["gain"][0] == 0.5
    assert summary["local/rl/train"]["gain"][0] == 0.0
    assert summary["verl/rl/heldout"]["gain"][0] == 0.0


def test_a_seeded_verl_validation_pairs_by_the_attempt_its_summary_names(tmp_path: Path) -> None:
    """verl's validation trials finish in any order; each summary line names its seeded attempt, and the bench
    keys the outcome by it (not by the order the trials finished), so before and after pair attempt by attempt."""
    learning = load_script("bench/learning.py")
    folder = tmp_path / "step_1"
    folder.mkdir()
    sessions = [{"session": f"lru__{a}", "task_id": "lru-cache-recency", "reward": r, "masked": False,
                 "outcome": "passed" if r else "failed_tests", "attempt": a} for a, r in ((2, 1.0), (0, 0.0), (1, 1.0))]
    (folder / "summary.json").write_text(json.dumps({"step": 1, "sessions": sessions}))
    assert learning.passes(folder / "results.jsonl", SOURCES)["train"] == {"lru-cache-recency": {0: 0.0, 1: 1.0,
                                                                                                 2: 1.0}}
