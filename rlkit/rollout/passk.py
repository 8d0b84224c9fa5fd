"""pass@k: the unbiased estimator of Chen et al. (2021), per task and over an index.

With n graded attempts of a task of which c passed, pass@k = 1 - C(n-c, k) / C(n, k):
the chance that k attempts drawn without replacement from the n contain a pass. The
product form below avoids the huge binomials. `rlkit eval` and the trainer's validation
both report these numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c passes (requires 1 <= k <= n, 0 <= c <= n)."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:  # every draw of k contains a pass
        return 1.0
    fail_all = 1.0
    for i in range(n - c + 1, n + 1):
        fail_all *= 1.0 - k / i
    return 1.0 - fail_all


def task_pass_at(counts: tuple[int, int], ks: Iterable[int]) -> dict[int, float | None]:
    """pass@k of one task's (n, c) for each k; None where the task has fewer than k attempts."""
    n, c = counts
    return {k: pass_at_k(n, c, k) if n >= k else None for k in ks}


def mean_pass_at(per_task: Mapping[str, Mapping[int, float | None]], k: int) -> float | None:
    """Mean pass@k over the tasks that have at least k attempts (None when none has)."""
    values = [v[k] for v in per_task.values() if v.get(k) is not None]
    return sum(values) / len(values) if values else None  # type: ignore[arg-type]


# --- intervals ---------------------------------------------------------------------------------
# Nested outcomes: group (a seed, a run) -> task -> attempt number -> 1.0 passed / 0.0 failed
# (graded attempts only). pass@1 of a group is the mean over its tasks of each task's pass share;
# of several groups, the mean over groups.
Passes = Mapping[str, Mapping[str, Mapping[int, float]]]


def pass1(groups: Passes) -> float | None:
    """pass@1 over groups, tasks and attempts (None when nothing was graded)."""
    per_group = []
    for tasks in groups.values():
        shares = [sum(a.values()) / len(a) for a in tasks.values() if a]
        if shares:
            per_group.append(sum(shares) / len(shares))
    return sum(per_group) / len(per_group) if per_group else None


def _resample(groups: Passes, rng: object, *, resample_groups: bool) -> dict[str, dict[str, dict[int, float]]]:
    """One bootstrap draw: groups (when asked), then tasks within a group, then attempts within a task,
    each with replacement; attempt numbers are kept so paired draws stay paired."""
    names = list(groups)
    picked = [names[i] for i in rng.integers(0, len(names), len(names))] if resample_groups else names
    out: dict[str, dict[str, dict[int, float]]] = {}
    for g, name in enumerate(picked):
        tasks = list(groups[name])
        draw: dict[str, dict[int, float]] = {}
        for t, i in enumerate(rng.integers(0, len(tasks), len(tasks))):
            attempts = groups[name][tasks[i]]
            keys = list(attempts)
            draw[f"{t}"] = {j: attempts[keys[k]] for j, k in enumerate(rng.integers(0, len(keys), len(keys)))} \
                if keys else {}
        out[f"{g}"] = draw
    return out


def pass1_interval(groups: Passes, *, reps: int = 2000, level: float = 0.95, seed: int = 0,
                   resample_groups: bool = True) -> tuple[float | None, float | None, float | None]:
    """(pass@1, low, high): a percentile bootstrap over groups, tasks and attempts."""
    import numpy as np

    rng = np.random.default_rng(seed)
    point = pass1(groups)
    if point is None:
        return None, None, None
    draws = [pass1(_resample(groups, rng, resample_groups=resample_groups)) for _ in range(reps)]
    values = np.array([d for d in draws if d is not None])
    tail = (1.0 - level) / 2 * 100
    return point, float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def paired_gain_interval(before: Passes, after: Passes, *, reps: int = 2000, level: float = 0.95, seed: int = 0,
                         resample_groups: bool = True) -> tuple[float | None, float | None, float | None]:
    """(gain, low, high) of pass@1 after minus before, resampling groups, tasks and attempt numbers
    jointly, so attempt j before and after (drawn with the same seed) stay a pair."""
    pairs: dict[str, dict[str, dict[int, float]]] = {}
    for g, tasks in before.items():
        for task, attempts in tasks.items():
            later = after.get(g, {}).get(task, {})
            both = {j: later[j] - attempts[j] for j in attempts if j in later}
            if both:
                pairs.setdefault(g, {})[task] = both
    return pass1_interval(pairs, reps=reps, level=level, seed=seed, resample_groups=resample_groups)
