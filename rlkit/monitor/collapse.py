"""Collapse, named while it happens: the pass rate falls over several steps while the policy spreads out
(entropy rises) or one way of ending takes over the trials.

Pure: per-step points in (`points` builds them from metric records and step summaries), one finding
or None out. `rlkit status` (text and --json) and the dashboard show it.

The rule (W = 4 steps; margins set so that a run whose 16-trial steps jitter by ±0.2 around a
steady pass rate is not named, while one that loses a third of its pass rate is):

  1. what fell, one of
     - reward (critic/score/mean, else critic/rewards/mean, else rollout/pass_rate, else the step
       summary's reward_mean): the mean of the last W steps is below the best mean of any earlier
       W steps (a stretch that ends before the last W begin) by >= 0.15 and by >= a third of that
       best; at least 2W steps with a reward are needed;
     - validation pass@1 (val/pass@1, else the mean of verl's val-core/*/reward/mean@*): the latest
       validation is below the best one >= W steps before it, by the same margins;
  2. and what came with it, over the same two stretches (the best W steps, the last W steps), one of
     - entropy (actor/entropy) rose and stayed up: the last W steps' mean >= 1.75x the best stretch's and
       >= 0.05 more, and each of the last W steps above each step of the best stretch;
     - one outcome took over: a way of ending other than passed and failed_tests (failed_tests is
       the plain failure that any fall of the pass rate brings) holds >= 60% of the last W steps'
       trials (shares of rollout/outcome/* over rollout/trials, else summary.json's outcomes) and
       >= 0.25 more than in the best stretch. A takeover is strong evidence by itself, and a reward
       that pays broken endings falls less, so with one the fall in (1) needs only >= 0.1 and >= a
       quarter of the best.

A fall without (2) is not named (a run whose pass rate wanders down by chance on a noisy task mix),
nor is a rising entropy or a dominant outcome without a fall.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlkit.monitor.firststep import HINTS, INFRA

WINDOW = 4  # steps per stretch compared
MIN_DROP = 0.15  # absolute fall of the stretch mean
MIN_REL_DROP = 1 / 3  # ... and relative to the best stretch
TAKEOVER_DROP = 0.1  # the margins when an outcome takes over (itself strong evidence; a reward that pays
TAKEOVER_REL_DROP = 1 / 4  # broken endings falls less)
ENTROPY_RATIO = 1.75
ENTROPY_MIN_RISE = 0.05
TAKEOVER_SHARE = 0.6
TAKEOVER_RISE = 0.25
LOOKBACK = 64  # steps a reader hands in: status reads the last LOOKBACK step records only ...
LOOKBACK_BYTES = 4 << 20  # ... within the metric file's last 4 MiB (~1,300 JSONL steps; a console log
# thick with other output between steps gives fewer, and 2W = 8 are enough)
PLAIN = ("passed", "failed_tests")  # ways of ending that are no takeover
BROKEN_PROTOCOL = ("agent_error", "parse_error")  # what the config key BROKEN_PROTOCOL_REWARD prices
REWARD_KEYS = ("critic/score/mean", "critic/rewards/mean", "rollout/pass_rate")
OUTCOME_PREFIX = "rollout/outcome/"
OUTCOME_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")  # rollout.summary's names; anything else a file says is left out


@dataclass(frozen=True)
class StepPoint:
    """One training step's numbers the rule reads."""

    step: int
    reward: float | None = None
    entropy: float | None = None
    outcomes: Mapping[str, float] = field(default_factory=dict)  # outcome -> share of the step's trials
    paid: Mapping[str, float] = field(default_factory=dict)  # outcome -> share of its trials that earned reward >= 1
    val_pass1: float | None = None
    lr: float | None = None


@dataclass(frozen=True)
class Collapse:
    """A collapse in progress: what fell (`signal`), what came with it (`kind`), over which steps, the numbers."""

    kind: str  # "entropy_rise" | "outcome_takeover"
    signal: str  # "reward" | "val/pass@1"
    first_step: int  # the last step of the best stretch (or the best validation): where the fall began
    last_step: int
    before: float  # the best stretch's mean (the best validation)
    after: float  # the last stretch's mean (the latest validation)
    entropy: tuple[float, float] | None = None  # (best stretch, last stretch) means
    outcome: str | None = None  # the outcome that took over
    share: tuple[float, float] | None = None  # its share (best stretch, last stretch)
    paid: float | None = None  # share of its trials in the last stretch that still earned reward >= 1
    lr: float | None = None
    window: int = WINDOW
    advice: tuple[str, ...] = ()

    @property
    def numbers(self) -> str:
        what = (f"{self.window}-step mean reward" if self.signal == "reward" else "validation pass@1")
        parts = [f"{what} {self.before:.2f} → {self.after:.2f} (steps {self.first_step} → {self.last_step})"]
        if self.outcome and self.share:
            paid = f", {self.paid:.0%} of them still paid reward 1" if self.paid else ""
            parts.append(f"{self.outcome} {self.share[0]:.0%} → {self.share[1]:.0%} of trials{paid}")
        if self.entropy:
            parts.append(f"entropy {self.entropy[0]:.3g} → {self.entropy[1]:.3g}")
        return "; ".join(parts)

    @property
    def headline(self) -> str:
        fell = "reward" if self.signal == "reward" else "validation pass@1"
        how = f"{self.outcome} takes over" if self.kind == "outcome_takeover" else "entropy rises"
        return f"collapse: {fell} falls while {how}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "signal": self.signal, "first_step": self.first_step,
                "last_step": self.last_step, "before": self.before, "after": self.after,
                "entropy": list(self.entropy) if self.entropy else None, "outcome": self.outcome,
                "share": list(self.share) if self.share else None, "paid": self.paid, "lr": self.lr,
                "window": self.window, "headline": self.headline, "numbers": self.numbers,
                "advice": list(self.advice)}


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _fell(before: float, after: float, takeover: bool = False) -> bool:
    drop = before - after
    if takeover:
        return drop >= TAKEOVER_DROP and drop >= TAKEOVER_REL_DROP * before
    return drop >= MIN_DROP and drop >= MIN_REL_DROP * before


def _entropy(best: Sequence[StepPoint], last: Sequence[StepPoint]) -> tuple[float, float] | None:
    a, b = _mean([p.entropy for p in best]), _mean([p.entropy for p in last])
    return None if a is None or b is None else (a, b)


def _rose(best: Sequence[StepPoint], last: Sequence[StepPoint]) -> bool:
    """Entropy rose, and stayed up: the means by the margins, and every step of the last stretch above every step
    of the best one (one noisy step does not make a rise)."""
    means = _entropy(best, last)
    if means is None or means[1] < ENTROPY_RATIO * means[0] or means[1] - means[0] < ENTROPY_MIN_RISE:
        return False
    return min(p.entropy for p in last if p.entropy is not None) > max(p.entropy for p in best if p.entropy is not None)


def _takeover(best: Sequence[StepPoint], last: Sequence[StepPoint]) -> tuple[str, float, float] | None:
    """The outcome (not passed, not failed_tests) that holds >= TAKEOVER_SHARE of the last stretch's trials and rose."""
    if not any(p.outcomes for p in last):
        return None
    names = {k for p in last for k in p.outcomes} - set(PLAIN)
    found = None
    for name in sorted(names):
        after = _mean([p.outcomes.get(name, 0.0) for p in last if p.outcomes]) or 0.0
        before = _mean([p.outcomes.get(name, 0.0) for p in best if p.outcomes]) or 0.0
        if after >= TAKEOVER_SHARE and after - before >= TAKEOVER_RISE and (found is None or after > found[2]):
            found = (name, before, after)
    return found


def _advice(kind: str, outcome: str | None, paid: float | None, lr: float | None, first_step: int) -> tuple[str, ...]:
    if outcome in INFRA:
        return (f"{outcome} is the infrastructure's failure, not the policy's: {HINTS.get(outcome, '')}",)
    out = []
    if outcome:
        if paid:
            zero = " (BROKEN_PROTOCOL_REWARD=zero pays them 0)" if outcome in BROKEN_PROTOCOL else ""
            out.append(f"check the reward for broken endings: {paid:.0%} of the {outcome} trials earned reward 1, "
                       f"so the reward pays ending that way{zero}; open them in the dashboard's trajectories")
        else:
            out.append(f"check the reward for broken endings: open the {outcome} trials in the dashboard; "
                       f"{HINTS.get(outcome, '')}".rstrip("; "))
    out.append(f"lower the learning rate: LR={lr / 3:.2g} or less (actor/lr is {lr:.3g})" if lr
               else "lower the learning rate (LR), e.g. to a third")
    out.append("add a KL loss to hold the policy near its start: KL_LOSS_COEF (e.g. 0.1-1.0)")
    if kind == "entropy_rise":
        out.append("the policy spreads out: check for a learning rate too high for the batch, or mostly "
                   "negative advantages (pass rates near 0 within groups)")
    out.append(f"restart from a checkpoint saved at or before step {first_step} (TRAINER_SAVE_FREQ keeps them)")
    return tuple(out)


def _finding(signal: str, before: float, after: float, first_step: int, best: Sequence[StepPoint],
             last: Sequence[StepPoint]) -> Collapse | None:
    entropy = _entropy(best, last)
    takeover = _takeover(best, last)
    if takeover is None and not (_rose(best, last) and _fell(before, after)):
        return None
    if takeover is not None and not _fell(before, after, takeover=True):
        return None
    lr = next((p.lr for p in reversed(last) if p.lr), None)
    kind, outcome, share, paid = "entropy_rise", None, None, None
    if takeover is not None:
        kind, outcome, share = "outcome_takeover", takeover[0], (takeover[1], takeover[2])
        paid = _mean([p.paid[outcome] for p in last if outcome in p.paid])
    return Collapse(kind, signal, first_step, last[-1].step, before, after, entropy, outcome, share, paid, lr,
                    WINDOW, _advice(kind, outcome, paid, lr, first_step))


def _by_reward(points: Sequence[StepPoint]) -> Collapse | None:
    pts = [p for p in points if p.reward is not None]
    if len(pts) < 2 * WINDOW:
        return None
    last = pts[-WINDOW:]
    after = _mean([p.reward for p in last])
    best_end, before = None, None
    for end in range(WINDOW, len(pts) - WINDOW + 1):  # stretches pts[end-W:end] that end before the last begins
        m = _mean([p.reward for p in pts[end - WINDOW:end]])
        if m is not None and (before is None or m > before):
            best_end, before = end, m
    if before is None or after is None or best_end is None or not _fell(before, after, takeover=True):
        return None
    best = pts[best_end - WINDOW:best_end]
    return _finding("reward", before, after, best[-1].step, best, last)


def _by_validation(points: Sequence[StepPoint]) -> Collapse | None:
    vals = [p for p in points if p.val_pass1 is not None]
    if len(vals) < 2:
        return None
    latest = vals[-1]
    earlier = [p for p in vals[:-1] if latest.step - p.step >= WINDOW]
    if not earlier:
        return None
    top = max(earlier, key=lambda p: p.val_pass1 or 0.0)
    before, after = top.val_pass1 or 0.0, latest.val_pass1 or 0.0
    if not _fell(before, after, takeover=True):
        return None
    trained = [p for p in points if p.reward is not None or p.entropy is not None or p.outcomes]
    best = [p for p in trained if p.step <= top.step][-WINDOW:] or trained[:WINDOW]
    last = [p for p in trained if p.step > top.step][-WINDOW:]
    if not best or not last:
        return None
    return _finding("val/pass@1", before, after, top.step, best, last)


def detect(points: Sequence[StepPoint]) -> Collapse | None:
    """The collapse the points show (the module's rule), or None. Points in step order, one per step."""
    points = sorted(points, key=lambda p: p.step)
    return _by_reward(points) or _by_validation(points)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shares(outcomes: Mapping[str, Any], trials: Any) -> dict[str, float]:
    counts = {k: float(v) for k, v in outcomes.items()
              if OUTCOME_NAME_RE.match(str(k)) and _finite(v)}
    total = float(trials) if _finite(trials) and trials > 0 else sum(counts.values())
    return {k: v / total for k, v in counts.items() if v > 0} if total > 0 else {}


def _paid(summary: Mapping[str, Any]) -> dict[str, float]:
    listed = summary.get("sessions")
    sessions = [s for s in listed if isinstance(s, dict)] if isinstance(listed, list) else []
    seen: dict[str, list[bool]] = {}
    for s in sessions:
        outcome, reward = s.get("outcome"), s.get("reward")
        if isinstance(outcome, str) and OUTCOME_NAME_RE.match(outcome):
            seen.setdefault(outcome, []).append(_finite(reward) and reward >= 1.0)
    return {k: sum(v) / len(v) for k, v in seen.items() if v}


def _val_pass1(data: Mapping[str, float]) -> float | None:
    if "val/pass@1" in data:
        return data["val/pass@1"]
    return _mean([v for k, v in data.items() if k.startswith("val-core/") and "/reward/mean@" in k])


def points(records: Sequence[tuple[int, Mapping[str, float]]],
           summaries: Mapping[int, Mapping[str, Any] | None] | None = None) -> list[StepPoint]:
    """Step points from metric records (step, {metric: value}) and step summaries (step -> summary.json), either
    side may lack a step. A validation-only record (verl's step 0) gives a point with the validation alone."""
    summaries = summaries or {}
    by_step = {int(s): dict(d) for s, d in records}
    out = []
    for step in sorted(set(by_step) | {s for s, v in summaries.items() if isinstance(v, Mapping)}):
        data = by_step.get(step, {})
        summary = summaries.get(step) if isinstance(summaries.get(step), Mapping) else None
        reward = next((data[k] for k in REWARD_KEYS if k in data), None)
        if reward is None and summary and _finite(summary.get("reward_mean")):
            reward = float(summary["reward_mean"])
        counts = {k[len(OUTCOME_PREFIX):]: v for k, v in data.items() if k.startswith(OUTCOME_PREFIX)}
        if counts:
            outcomes = _shares(counts, data.get("rollout/trials"))
        elif summary and isinstance(summary.get("outcomes"), Mapping):
            outcomes = _shares(summary["outcomes"], summary.get("trials"))
        else:
            outcomes = {}
        out.append(StepPoint(step, reward, data.get("actor/entropy"), outcomes, _paid(summary) if summary else {},
                             _val_pass1(data), data.get("actor/lr")))
    return out
