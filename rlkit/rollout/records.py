"""What the rollout engine hands the trainers: one record per trial, one result per step.

This is the one batch type of a training step. The local trainer and the verl bridge
read it; `step_<N>/summary.json` and the monitor read its summary. Pure data, no I/O.

Outcome rules (one outcome per trial). Each outcome is the fault of the agent or of the
infrastructure; this table is the one place that decides, and both trainers read it
(`Outcome.masked`):

  outcome                                       fault            trained as
  passed, failed_tests                          graded           the tests' reward
  parse_error, agent_error                      agent (BROKEN)   0 (BROKEN_PROTOCOL_REWARD=tests: the tests')
  agent_timeout                                 agent            the tests' reward (0 unless they pass)
  context_exceeded, call_limit, response_budget agent (TRUNCATIONS) the tests' reward
  tamper_suspect                                agent            reward 0 (TAMPER_POLICY=mask: masked)
  tests_missing                                 agent            reward 0: pytest's exit said pass, but the
                                                                 verifier's record lacks tests or passes
  no_reward_file                                infrastructure   masked: the task's grading wrote nothing,
                                                                 so there is no grade to learn from
  verifier_timeout                              infrastructure   masked: the tests' run time is the
                                                                 machine's (a loaded host times them out)
  verifier_error, sandbox_error, error          infrastructure   masked

  * A masked trial is counted (its outcome, `StepSummary.masked`) and never fails the step.
  * A trial with no model tokens has nothing to train on: it is masked too.
  * A prompt group (same `uid`) whose trials are all masked is dropped, and counted.
  * One trial is one member of its group, on both trainers: it trains on ONE token segment,
    its longest chain (`longest_chain`), and its reward counts once in the group's statistics.
    The proxy's other segments of the trial (prefix breaks) are dropped and counted.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Outcome(StrEnum):
    """Why a trial ended the way it did."""

    PASSED = "passed"                      # graded, reward > 0 (reward 1.0 for a full pass)
    FAILED_TESTS = "failed_tests"          # graded, reward 0: a wrong answer
    PARSE_ERROR = "parse_error"            # the proxy could not parse the model's tool call(s)
    CONTEXT_EXCEEDED = "context_exceeded"  # a prompt outgrew the context window (truncation)
    CALL_LIMIT = "call_limit"              # the session's model-call budget ran out (truncation)
    RESPONSE_BUDGET = "response_budget"    # the session's response-token budget (MAX_RESP) ran out (truncation)
    AGENT_TIMEOUT = "agent_timeout"        # the agent ran past its timeout; still graded
    AGENT_ERROR = "agent_error"            # the agent process failed; still graded
    NO_REWARD_FILE = "no_reward_file"      # the tests wrote no reward
    VERIFIER_TIMEOUT = "verifier_timeout"  # the tests ran past their timeout
    VERIFIER_ERROR = "verifier_error"      # the verifier itself failed (unreadable reward, copy error)
    TAMPER_SUSPECT = "tamper_suspect"      # the agent left files that can steer the verifier
    TESTS_MISSING = "tests_missing"        # the tests said pass, the verifier's own record of them did not
    SANDBOX_ERROR = "sandbox_error"        # the sandbox could not start / exec / copy (after retries)
    ERROR = "error"                        # an internal failure of rlkit or harbor

    @property
    def masked(self) -> bool:
        return self in INFRA

    @property
    def truncated(self) -> bool:
        return self in TRUNCATIONS

    @property
    def broke_protocol(self) -> bool:
        return self in BROKEN_PROTOCOL


INFRA: frozenset[Outcome] = frozenset({Outcome.SANDBOX_ERROR, Outcome.VERIFIER_ERROR, Outcome.ERROR,
                                        Outcome.NO_REWARD_FILE, Outcome.VERIFIER_TIMEOUT})
TRUNCATIONS: frozenset[Outcome] = frozenset({Outcome.CONTEXT_EXCEEDED, Outcome.CALL_LIMIT,
                                             Outcome.RESPONSE_BUDGET})
# The agent broke its scaffold's protocol: a reward here would pay the broken ending (BROKEN_PROTOCOL_REWARD).
BROKEN_PROTOCOL: frozenset[Outcome] = frozenset({Outcome.PARSE_ERROR, Outcome.AGENT_ERROR})


class TokenSegment(BaseModel):
    """One contiguous token sequence from the proxy (a run of calls sharing a prefix).

    `response_mask` is 1 on tokens the model sampled and 0 on tokens inserted between
    calls (tool output, user turns); `response_logprobs` are vLLM's sampling logprobs
    (0.0 where the mask is 0). All three response lists have the same length."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    num_turns: int = 0

    @classmethod
    def from_proxy(cls, segment: dict[str, Any]) -> TokenSegment:
        """From one entry of the proxy's `GET /s/<sid>/trajectory` `segments` list."""
        return cls(prompt_ids=segment["prompt_ids"], response_ids=segment["response_ids"],
                   response_mask=segment["response_mask"], response_logprobs=segment["response_logprobs"],
                   num_turns=int(segment.get("num_turns", 0)))


class TrialRecord(BaseModel):
    """One trial, as the trainer sees it."""

    model_config = ConfigDict(extra="forbid")

    uid: str = Field(description="prompt group id: trials of one index row in one step share it (GRPO groups)")
    task_id: str
    session: str = Field(description="proxy session id = trial directory name")
    outcome: Outcome
    reward: float = Field(description="the tests' reward (0.0 when there is none)")
    masked: bool = Field(description="excluded from training (infrastructure failure or no tokens)")
    segments: list[TokenSegment] = Field(default_factory=list)
    num_turns: int = 0
    num_breaks: int = Field(default=0, description="prefix breaks in the proxy's record (segments - 1)")
    parse_failures: int = 0
    timings: dict[str, float] = Field(default_factory=dict,
                                      description="seconds: sandbox, agent, verifier, model, total")
    attempts: int = Field(default=1, description="1 + infrastructure retries")
    attempt: int | None = Field(default=None, description="the task's attempt number in a seeded pass (validation): "
                                "its sampling seed comes from (SEED, task, attempt), so passes pair by it")
    trial_dir: Path | None = None
    detail: str | None = Field(default=None, description="exception type and message, when there was one")

    @property
    def trainable(self) -> bool:
        return not self.masked and any(any(s.response_mask) for s in self.segments)

    def training_segment(self) -> TokenSegment | None:
        """The one segment this trial trains on (None when it is not trainable): its longest chain."""
        return longest_chain(self.segments) if self.trainable else None

    @property
    def dropped_model_tokens(self) -> int:
        """Model-sampled tokens outside the training segment (in the proxy's other segments)."""
        kept = self.training_segment()
        return sum(sum(s.response_mask) for s in self.segments) - (sum(kept.response_mask) if kept else 0)


def longest_chain(segments: list[TokenSegment]) -> TokenSegment | None:
    """The segment with the most model-sampled tokens; a tie goes to the later one, which holds the
    final answer the tests graded. None when no segment has a sampled token."""
    best: TokenSegment | None = None
    for segment in segments:
        if any(segment.response_mask) and (best is None or sum(segment.response_mask) >= sum(best.response_mask)):
            best = segment
    return best


class TrialBrief(BaseModel):
    """One trial's line in `summary.json` (`StepSummary.sessions`): what the trajectory browser sorts by."""

    model_config = ConfigDict(extra="forbid")

    session: str
    task_id: str
    outcome: Outcome
    reward: float
    masked: bool
    num_turns: int = 0
    parse_failures: int = 0
    attempt: int | None = None  # a seeded pass's attempt number (TrialRecord.attempt)


class StepSummary(BaseModel):
    """`step_<N>/summary.json`: what status and the dashboard read."""

    model_config = ConfigDict(extra="forbid")

    step: int
    trials: int
    outcomes: dict[str, int] = Field(description="outcome -> count (every Outcome value present, 0 if none)")
    reward_mean: float
    pass_rate: float = Field(description="share of graded (unmasked) trials with reward >= 1")
    masked: int
    truncated: int
    dropped_groups: int = Field(description="prompt groups whose trials were all masked")
    parse_failures: int
    num_breaks: int
    timing_s: dict[str, float] = Field(description="seconds summed over trials: sandbox, agent, verifier, "
                                                   "model; plus wall (the step's elapsed time)")
    timing_share: dict[str, float] = Field(description="sandbox/agent/verifier/model as shares of their sum")
    sessions: list[TrialBrief] = Field(default_factory=list, description="one line per trial (added later: "
                                       "older summaries have none)")
    update_skipped: bool = Field(False, description="no trial of the step was trainable (all masked): the "
                                 "trainer skipped its update (`rlkit/train/skip.py`)")


class StepResult(BaseModel):
    """All trials of one step plus their summary."""

    model_config = ConfigDict(extra="forbid")

    step: int
    records: list[TrialRecord]
    summary: StepSummary
    step_dir: Path | None = None

    def groups(self) -> dict[str, list[TrialRecord]]:
        """Trainable trials by uid; groups with no trainable trial are left out (dropped)."""
        out: dict[str, list[TrialRecord]] = {}
        for record in self.records:
            if record.trainable:
                out.setdefault(record.uid, []).append(record)
        return out
