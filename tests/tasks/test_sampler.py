from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlkit.errors import UserError
from rlkit.tasks.index import IndexRow
from rlkit.tasks.sampler import DifficultyFilter, TaskSampler


def _rows(n: int = 10) -> list[IndexRow]:
    labels = ["easy", "medium", "hard", None]
    return [IndexRow(task_id=f"t{i}", task_source=f"/tasks/t{i}", image=f"img{i}", split="train" if i % 5 else "val",
                     pass_rate=None if i % 4 == 3 else i / 10, difficulty=labels[i % 4]) for i in range(n)]


def ids(rows: list[IndexRow]) -> list[str]:
    return [r.task_id for r in rows]


def test_each_epoch_is_a_permutation():
    sampler = TaskSampler(_rows(), seed=3)
    for epoch in range(4):
        assert sorted(ids(sampler.epoch_order(epoch))) == sorted(ids(sampler.rows))


def test_deterministic_per_seed_and_epoch():
    a, b = TaskSampler(_rows(), seed=3), TaskSampler(_rows(), seed=3)
    assert ids(a.epoch_order(2)) == ids(b.epoch_order(2))
    assert ids(a.epoch_order(0)) != ids(a.epoch_order(1))
    assert ids(a.epoch_order(0)) != ids(TaskSampler(_rows(), seed=4).epoch_order(0))


def test_batches_walk_epochs_and_resume_identically():
    sampler = TaskSampler(_rows(), seed=1)
    batches = [ids(sampler.batch(step, 4)) for step in range(5)]  # 20 draws over 10 rows = 2 epochs
    flat = [t for b in batches for t in b]
    assert flat[:10] == ids(sampler.epoch_order(0))
    assert flat[10:20] == ids(sampler.epoch_order(1))
    assert batches[2] == ids(sampler.epoch_order(0))[8:] + ids(sampler.epoch_order(1))[:2]  # crosses an epoch
    assert ids(TaskSampler(_rows(), seed=1).batch(3, 4)) == batches[3]  # a restart gets the same step
    assert sampler.epoch_of(2, 4) == 0 and sampler.epoch_of(3, 4) == 1


def test_batch_larger_than_dataset():
    sampler = TaskSampler(_rows(3), seed=0)
    batch = ids(sampler.batch(0, 7))
    assert len(batch) == 7
    assert batch[:3] == ids(sampler.epoch_order(0)) and batch[3:6] == ids(sampler.epoch_order(1))


def test_split_filter():
    assert {r.split for r in TaskSampler(_rows(), split="val").rows} == {"val"}


def test_pass_rate_filter():
    rows = _rows()
    kept = TaskSampler(rows, difficulty=DifficultyFilter(min_pass_rate=0.2, max_pass_rate=0.6,
                                                          keep_unknown=False)).rows
    assert ids(kept) == ["t2", "t4", "t5", "t6"]
    with_unknown = TaskSampler(rows, difficulty=DifficultyFilter(min_pass_rate=0.2, max_pass_rate=0.6)).rows
    assert set(ids(with_unknown)) == {"t2", "t3", "t4", "t5", "t6", "t7"}


def test_label_filter():
    kept = TaskSampler(_rows(), difficulty=DifficultyFilter(labels=frozenset({"Easy", "hard"}),
                                                             keep_unknown=False)).rows
    assert {r.difficulty for r in kept} == {"easy", "hard"}


def test_filter_that_removes_everything_is_a_user_error():
    with pytest.raises(UserError, match="no task left"):
        TaskSampler(_rows(), difficulty=DifficultyFilter(min_pass_rate=0.95, keep_unknown=False))


def test_invalid_filter_and_arguments():
    with pytest.raises(ValidationError):
        DifficultyFilter(min_pass_rate=0.8, max_pass_rate=0.2)
    with pytest.raises(ValidationError):
        DifficultyFilter(bogus=1)
    sampler = TaskSampler(_rows())
    with pytest.raises(ValueError):
        sampler.batch(0, 0)
    with pytest.raises(ValueError):
        sampler.epoch_order(-1)
