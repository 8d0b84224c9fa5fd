"""The three first-step numbers, in the order a run produces them, each with a plain verdict.

  1. early / parse share   trials that ended early (a budget, the context window, the agent's
                           timeout or error) or whose tool calls did not parse: the typo signal
  2. reward                reward mean and pass rate; at zero, the dominant outcome across trials
  3. step time             seconds per step and the rollout share timing_s/gen / timing_s/step

Inputs are a step's summary.json (dict) and its metrics record; either may be missing
(a verl run without rlkit's summaries has only the metrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, WARN, BAD = "✓", "⚠", "✗"
EARLY = ("context_exceeded", "call_limit", "response_budget", "agent_timeout", "agent_error")
INFRA = ("sandbox_error", "verifier_error", "error", "no_reward_file", "verifier_timeout")  # rollout/records.py's masked
# What to look at when an outcome dominates a zero-reward step.
HINTS = {
    "parse_error": "the proxy could not parse the model's tool calls: TOOL_CALL_PARSER does not match the model's "
                   "chat template (rlkit check CFG probes it)",
    "response_budget": "trials ran out of response tokens: the model rambles or MAX_RESP is too small",
    "call_limit": "trials ran out of model calls: the agent loops",
    "context_exceeded": "prompts outgrew the context window: raise MAX_PROMPT or shorten the scaffold's prompt",
    "agent_timeout": "agents ran past their timeout",
    "agent_error": "the agent process failed: see a trial's exception.txt",
    "failed_tests": "the model's answers fail the tests: the model is too weak for these tasks (warm start, easier tasks)",
    "no_reward_file": "the tests wrote no reward: check the tasks' tests/test.sh",
    "verifier_timeout": "the tests ran past their timeout",
    "verifier_error": "the verifier failed: see a trial's verifier/ folder",
    "sandbox_error": "sandboxes failed to start: check docker and the task images (rlkit images build)",
    "tamper_suspect": "agents left files that can steer the verifier",
    "tests_missing": "the tests' exit said pass but the verifier's record of them lacks tests: an agent ended them early",
    "error": "internal errors: see the trials' exception.txt",
}


@dataclass(frozen=True)
class Number:
    name: str
    value: str
    mark: str
    verdict: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value, "mark": self.mark, "verdict": self.verdict}


def dominant(outcomes: dict[str, int]) -> tuple[str, int] | None:
    counted = [(n, k) for k, n in outcomes.items() if n]
    if not counted:
        return None
    n, k = max(counted)
    return k, n


def _outcomes(summary: dict[str, Any] | None, metrics: dict[str, float]) -> dict[str, int]:
    if summary and isinstance(summary.get("outcomes"), dict):
        return {k: int(v) for k, v in summary["outcomes"].items()}
    prefix = "rollout/outcome/"
    return {k[len(prefix):]: int(v) for k, v in metrics.items() if k.startswith(prefix)}


def early_share(summary: dict[str, Any] | None, metrics: dict[str, float], parser: str | None) -> Number:
    outcomes = _outcomes(summary, metrics)
    trials = int((summary or {}).get("trials") or metrics.get("rollout/trials") or sum(outcomes.values()))
    if not trials:
        return Number("ended early / parse failures", "n/a", WARN, "no trials recorded for this step yet")
    parse = outcomes.get("parse_error", 0)
    early = sum(outcomes.get(k, 0) for k in EARLY)
    share = (parse + early) / trials
    value = f"{share:.0%} of {trials} trials ({parse} parse_error, {early} early)"
    top = dominant(outcomes)
    if parse and top and top[0] == "parse_error":
        name = f"TOOL_CALL_PARSER={parser}" if parser else "TOOL_CALL_PARSER"
        return Number("ended early / parse failures", value, BAD,
                      f"tool calls do not parse in most trials: {name} likely does not match the model "
                      "(the typo signal); fix the parser before spending more steps")
    if share > 0.5:
        worst = max(EARLY, key=lambda k: outcomes.get(k, 0))
        return Number("ended early / parse failures", value, BAD,
                      f"most trials ended early, mostly {worst}: {HINTS[worst]}")
    if share > 0.2:
        return Number("ended early / parse failures", value, WARN, "many trials end early; watch whether it falls")
    return Number("ended early / parse failures", value, OK, "trials run to the end and their tool calls parse")


def reward(summary: dict[str, Any] | None, metrics: dict[str, float]) -> Number:
    mean = metrics.get("critic/rewards/mean", metrics.get("critic/score/mean"))
    if mean is None and summary:
        mean = summary.get("reward_mean")
    rate = metrics.get("rollout/pass_rate", (summary or {}).get("pass_rate"))
    if mean is None:
        return Number("reward", "n/a", WARN, "no reward logged for this step yet")
    value = f"mean {mean:.3f}" + (f", pass rate {rate:.0%}" if rate is not None else "")
    outcomes = _outcomes(summary, metrics)
    if mean <= 0:
        top = dominant(outcomes)
        if top is None:
            return Number("reward", value, BAD, "zero reward; no outcome counts to say why")
        total = sum(outcomes.values())
        return Number("reward", value, BAD,
                      f"zero reward; dominant outcome {top[0]} ({top[1]}/{total} trials): {HINTS.get(top[0], '')}")
    if rate is not None and rate >= 1.0:
        return Number("reward", value, WARN, "every trial passes: GRPO groups carry no signal (tasks too easy)")
    masked = sum(outcomes.get(k, 0) for k in INFRA)
    if masked and masked * 2 >= sum(outcomes.values()):
        return Number("reward", value, WARN, f"{masked} trials masked by infrastructure failures")
    return Number("reward", value, OK, "some trials pass: there is signal to learn from")


def step_time(metrics: dict[str, float]) -> Number:
    step = metrics.get("timing_s/step", metrics.get("perf/time_per_step"))
    gen = metrics.get("timing_s/gen")
    if step is None:
        return Number("step time", "n/a", WARN, "no step time logged yet")
    if gen is None or step <= 0:
        return Number("step time", f"{step:.1f}s", WARN, "no timing_s/gen: the rollout share is unknown")
    share = gen / step
    value = f"{step:.1f}s, rollout {share:.0%} (timing_s/gen {gen:.1f}s)"
    if share >= 0.5:
        return Number("step time", value, OK, "rollout dominates, as expected: more rollout capacity shortens a step")
    return Number("step time", value, WARN, "training or weight sync dominates the step: look at timing_s/update_*")


def first_step_numbers(summary: dict[str, Any] | None, metrics: dict[str, float] | None,
                       parser: str | None = None) -> list[Number]:
    metrics = metrics or {}
    return [early_share(summary, metrics, parser), reward(summary, metrics), step_time(metrics)]
