"""Descriptive statistics for small lists of numbers."""

from collections import Counter


def mean(values):
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of empty data")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def mode(values):
    if not values:
        raise ValueError("mode of empty data")
    counts = Counter(values)
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best)
