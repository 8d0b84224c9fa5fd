"""Values from a run's outputs, checked as data: one place per file kind that is not a log line.

A run's files are written by the trainer, but also by agents (trajectories, test output) and
by anyone who can write under a shared OUTPUT_DIR. Every number read from them is a finite
number within bounds, every count a whole number within bounds, every text a string of bounded
length; anything else is left out (None), so one bad value never breaks a listing.

    count / number / text      one value
    summary(data)              step_<N>/summary.json (rlkit.rollout.records.StepSummary's fields)
    finite_json(obj)           a result safe for strict JSON: NaN and infinities become null
The metric and vLLM lines are checked where they are parsed (rlkit.monitor.metrics, vllm_log).
"""

from __future__ import annotations

import math
from typing import Any

COUNT_MAX = 10**9  # steps, trials, turns: no run has more
NUMBER_MAX = 1e18  # a metric's magnitude (token counts, seconds); products of two stay finite
TEXT_MAX = 1000
SUMMARY_COUNTS = ("step", "trials", "masked", "truncated", "dropped_groups", "parse_failures", "num_breaks")
SESSION_TEXT = ("session", "task_id", "outcome")
SESSION_COUNTS = ("num_turns", "parse_failures")


def count(value: Any, hi: int = COUNT_MAX) -> int | None:
    """A whole number in 0..hi (an integral float counts), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= hi else None


def number(value: Any, lo: float = -NUMBER_MAX, hi: float = NUMBER_MAX) -> float | None:
    """A finite number in lo..hi (a bool is 0 or 1), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int) and not -10**19 < value < 10**19:
        return None
    if isinstance(value, int | float) and math.isfinite(value) and lo <= value <= hi:
        return float(value)
    return None


def text(value: Any, limit: int = TEXT_MAX) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _numbers(value: Any, lo: float = -NUMBER_MAX) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {k[:200]: v for k, v in ((k, number(v, lo)) for k, v in value.items()) if isinstance(k, str)
            and v is not None}


def _session(row: Any) -> dict[str, Any] | None:
    if not isinstance(row, dict) or not isinstance(row.get("session"), str):
        return None
    out: dict[str, Any] = {k: text(row.get(k), 300) for k in SESSION_TEXT}
    out.update({k: count(row.get(k)) for k in SESSION_COUNTS})
    out["reward"] = number(row.get("reward"))
    out["masked"] = row.get("masked") if isinstance(row.get("masked"), bool) else None
    return out


def summary(data: Any) -> dict[str, Any] | None:
    """step_<N>/summary.json as data: each known field of its type and bounds (others left out); None when it
    is not an object."""
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {k: v for k, v in ((k, count(data.get(k))) for k in SUMMARY_COUNTS) if v is not None}
    for key, lo, hi in (("reward_mean", -NUMBER_MAX, NUMBER_MAX), ("pass_rate", 0.0, 1.0)):
        value = number(data.get(key), lo, hi)
        if value is not None:
            out[key] = value
    outcomes = data.get("outcomes")
    if isinstance(outcomes, dict):
        out["outcomes"] = {k[:64]: n for k, n in ((k, count(v)) for k, v in outcomes.items())
                           if isinstance(k, str) and n is not None}
    for key in ("timing_s", "timing_share"):
        if key in data:
            out[key] = _numbers(data[key], lo=0.0)
    sessions = data.get("sessions")
    if isinstance(sessions, list):
        out["sessions"] = [s for s in map(_session, sessions) if s is not None]
    return out


def finite_json(obj: Any, depth: int = 0) -> Any:
    """`obj` with every NaN / infinity as None (strict JSON has neither), dicts and lists walked."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if depth > 64:
        return None
    if isinstance(obj, dict):
        return {k: finite_json(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v, depth + 1) for v in obj]
    return obj
