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
