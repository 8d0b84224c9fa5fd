"""The train tasks' decoys (solution/decoys/*.sh): each fails the graded suite the oracle passes, and together
they leave the oracle no majority at any point where the fixes part, so a warm start taught all of them one
trial each (`rlkit sft`) cannot prefer the oracle by construction, greedy or sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.train._teacher import solution_keystrokes, task_fixes
from tests.tasks.conftest import EXAMPLES, graded_on_host

TRAIN = sorted(p.parents[1] for p in EXAMPLES.glob("*/solution/decoys"))


def fixes(task: Path) -> list[str]:
    """The keystrokes the teacher types for each fix: the oracle's first."""
    return [solution_keystrokes(fix) for fix in task_fixes(task)]


def oracle_shares(candidates: list[str]) -> list[tuple[int, int]]:
    """At each character where the fixes still on the oracle's path part: (fixes taking the oracle's next
    character, fixes still on the path). Sampled at temperature 1, a policy that learned every fix equally
    takes the oracle's side with that chance; greedy takes the larger side."""
    oracle, alive, shares = candidates[0], candidates, []
    for i, char in enumerate(oracle):
        if len({c[i:i + 1] for c in alive}) > 1:
            same = [c for c in alive if c[i:i + 1] == char]
            shares.append((len(same), len(alive)))
            alive = same
    return shares


def test_every_train_task_has_three_decoys() -> None:
    from rlkit.tasks.index import build_rows

    train = {r.task_id for r in build_rows(EXAMPLES, "train", val_fraction=0.3)}  # the embedded default's split
    assert {t.name for t in TRAIN} == train
    assert all(len(set(fixes(t))) == 4 for t in TRAIN)


@pytest.mark.parametrize("task", TRAIN, ids=lambda p: p.name)
def test_the_oracle_never_holds_a_majority_where_the_fixes_part(task: Path) -> None:
    """Two branch points, each split half and half: the oracle is one fix in four at temperature 1 and one
    greedy choice in four. (With two decoys, the first split went 2 to 1 the oracle's way, and the greedy warm
    start solved 4-5 of 7 train tasks.)"""
    shares = oracle_shares(fixes(task))
    assert len(shares) == 2 and all(2 * same == alive for same, alive in shares), shares


@pytest.mark.parametrize("task", TRAIN, ids=lambda p: p.name)
def test_the_graded_suite_passes_the_oracle_and_fails_no_change_and_every_decoy(task: Path, tmp_path: Path) -> None:
    decoys = sorted((task / "solution" / "decoys").glob("*.sh"))
    assert graded_on_host(task, task / "solution" / "solve.sh", tmp_path) == 0
    assert [graded_on_host(task, None, tmp_path), *(graded_on_host(task, d, tmp_path) for d in decoys)] == [1] * 4
