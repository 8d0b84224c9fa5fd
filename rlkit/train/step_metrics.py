"""verl's metric names for what a step's rollout produced (verl.trainer.ppo.metric_utils' names).

critic/score and critic/rewards are over graded (unmasked) trials; response_length counts a
trial's response tokens (model and tool tokens, as verl's agent loop does), clip_ratio the
share of truncated trials; rollout/* are rlkit's outcome counts from the step summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlkit.rollout.records import StepResult, TrialRecord


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"{prefix}/mean": float(mean(values)), f"{prefix}/max": float(max(values)),
            f"{prefix}/min": float(min(values))}


def response_length(record: TrialRecord) -> int:
    return sum(len(s.response_ids) for s in record.segments)


def rollout_metrics(result: StepResult) -> dict[str, float]:
    graded = [r for r in result.records if not r.masked]
    rewards = [r.reward for r in graded]
    out: dict[str, float] = {}
    out.update(_stats("critic/score", rewards))
    out.update(_stats("critic/rewards", rewards))
    out.update(_stats("response_length", [float(response_length(r)) for r in graded]))
    if graded:
        out["response_length/clip_ratio"] = sum(r.outcome.truncated for r in graded) / len(graded)
    out.update(_stats("num_turns", [float(r.num_turns) for r in graded]))
    s = result.summary
    out.update({"rollout/trials": float(s.trials), "rollout/pass_rate": s.pass_rate, "rollout/masked": float(s.masked),
                "rollout/truncated": float(s.truncated), "rollout/dropped_groups": float(s.dropped_groups),
                "rollout/parse_failures": float(s.parse_failures), "rollout/num_breaks": float(s.num_breaks)})
    out.update({f"rollout/outcome/{k}": float(v) for k, v in s.outcomes.items() if v})
    return out


def val_metrics(report: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, float]:
    """From `rlkit eval`'s pass@k report: `val-core/<data_source>/reward/mean@k` (verl's name: the share
    of graded attempts that passed) and `val/pass@1`, `val/pass@k` (unbiased, mean over tasks)."""
    k = int(report["k"])
    out: dict[str, float] = {}
    by_source: dict[str, list[tuple[int, int]]] = {}
    for tid, task in report["tasks"].items():
        by_source.setdefault(sources.get(tid, "tasks"), []).append((int(task["n"]), int(task["c"])))
    for source, pairs in by_source.items():
        graded = sum(n for n, _ in pairs)
        if graded:
            out[f"val-core/{source}/reward/mean@{k}"] = sum(c for _, c in pairs) / graded
    out.update({f"val/{name}": float(v) for name, v in report["overall"].items() if v is not None})
    out.update({f"val/{name}_stderr": float(v) for name, v in (report.get("stderr") or {}).items() if v is not None})
    return out
