"""pass@k against values computed by hand from 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

import pytest

from rlkit.rollout.passk import mean_pass_at, pass_at_k, task_pass_at


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 0, 1, 0.0),
    (4, 4, 4, 1.0),
    (4, 1, 1, 0.25),            # c / n
    (4, 1, 2, 0.5),             # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 2, 2, 5 / 6),           # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (5, 2, 3, 0.9),             # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (10, 3, 5, 11 / 12),        # 1 - C(7,5)/C(10,5) = 1 - 21/252
    (8, 1, 8, 1.0),             # every draw of all 8 holds the pass
    (3, 1, 3, 1.0),
])
def test_unbiased_estimator_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, 1, 0), (4, 1, 5), (0, 0, 1)])
def test_impossible_inputs_are_refused(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_tasks_with_too_few_attempts_are_left_out_of_the_mean():
    per_task = {"a": task_pass_at((4, 2), [1, 4]), "b": task_pass_at((2, 0), [1, 4])}
    assert per_task["a"] == {1: 0.5, 4: 1.0}
    assert per_task["b"] == {1: 0.0, 4: None}
    assert mean_pass_at(per_task, 1) == pytest.approx(0.25)
    assert mean_pass_at(per_task, 4) == 1.0
    assert mean_pass_at({}, 1) is None


def test_report_of_a_pass():
    from rlkit.rollout.passes import TaskTally, pass_at_k_report

    tallies = {"a": TaskTally(task_id="a", attempts=4, graded=4, passed=1),
               "b": TaskTally(task_id="b", attempts=4, graded=3, passed=3)}  # one attempt masked
    report = pass_at_k_report(tallies, 4)
    assert report["tasks"]["a"] == {"n": 4, "c": 1, "attempts": 4, "pass@1": 0.25, "pass@4": 1.0}
    assert report["tasks"]["b"]["pass@4"] is None  # 3 graded attempts cannot give pass@4
    assert report["overall"] == {"pass@1": pytest.approx(0.625), "pass@4": 1.0}
    # pass@1's standard error over the attempts: sqrt(0.25 * 0.75 / 4 + 1 * 0 / 3) / 2 tasks
    assert report["stderr"]["pass@1"] == pytest.approx((0.25 * 0.75 / 4) ** 0.5 / 2)


def test_pass1_and_its_intervals_over_groups_tasks_and_attempts():
    from rlkit.rollout.passk import paired_gain_interval, pass1, pass1_interval

    before = {"s0": {"a": {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}, "b": {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}},
              "s1": {"a": {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0}, "b": {0: 0.0, 1: 0.0, 2: 1.0, 3: 0.0}}}
    assert pass1(before) == pytest.approx(((0.5 + 0.0) / 2 + (0.5 + 0.25) / 2) / 2)
    point, low, high = pass1_interval(before, reps=500)
    assert low <= point <= high and 0.0 <= low < high <= 1.0
    # the same draws again: a paired gain of exactly 0 with a zero-width interval
    assert paired_gain_interval(before, before, reps=200) == (0.0, 0.0, 0.0)
    after = {g: {t: {j: 1.0 for j in a} for t, a in tasks.items()} for g, tasks in before.items()}
    gain, low, high = paired_gain_interval(before, after, reps=500)
    assert gain == pytest.approx(1.0 - pass1(before)) and 0.0 < low <= gain <= high <= 1.0
