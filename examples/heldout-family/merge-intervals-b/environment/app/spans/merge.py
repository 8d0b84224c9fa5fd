"""Interval arithmetic on closed integer intervals."""


def merge(intervals):
    """Union of (start, end) intervals as a sorted list of disjoint tuples."""
    merged = []
    for start, end in intervals:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
