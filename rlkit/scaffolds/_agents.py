"""harbor's agent classes, extended to write the proxy's token record as the trial's ATIF.

Each class here is harbor's own agent (same install checks, env, flags, config files)
plus one behaviour: after the agent ran, it fetches its session's record from the
proxy (`GET /s/<session>/trajectory`) and writes `agent/trajectory.json` with the
exact token ids. The trial runner loads them by import path
(`rlkit.scaffolds._agents:ClaudeCodeAgent`, ...). This module imports harbor and
litellm, so only the trial runner imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# litellm (imported by harbor's agents) must not fetch its cost map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harbor.agents.installed.claude_code import ClaudeCode
from harbor.agents.installed.opencode import OpenCode
from harbor.agents.installed.openhands_sdk import OpenHandsSDK
from harbor.agents.terminus_2 import Terminus2
from harbor.environments.base import BaseEnvironment
from harbor.llms.base import ContextLengthExceededError
from harbor.models.agent.context import AgentContext

from rlkit.sandbox.mounts import drop_symlinks
from rlkit.scaffolds.atif import calls_of, write_token_trajectory
from rlkit.scaffolds.tls import tls_context

TOKEN_RECORD_FILE = "proxy_record.json"
# The proxy's 400 for a session past its budget (calls or response tokens): the episode is over.
BUDGET_EXHAUSTED = "session_budget_exceeded"
OHSDK_PYTHON = "/opt/openhands-sdk-venv/bin/python"


async def fetch_session_record(url: str, timeout_s: float = 30.0) -> dict[str, Any] | None:
    """The proxy's record of one session, or None when the proxy cannot give it."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False, verify=tls_context()) as client:
            response = await client.get(url)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    body = response.json()
    return body if isinstance(body, dict) else None


class TokenRecordMixin:
    """Writes agent/trajectory.json from the proxy record after the agent's run."""

    logs_dir: Path
    logger: Any

    def __init__(self, *args: Any, rlkit_trajectory_url: str | None = None, rlkit_scaffold: str = "agent",
                 **kwargs: Any) -> None:
        self._trajectory_url = rlkit_trajectory_url
        self._scaffold = rlkit_scaffold
        self._record: dict[str, Any] | None = None
        self._instruction: str | None = None
        super().__init__(*args, **kwargs)

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        self._instruction = instruction  # the trajectory's first step: what the agent was asked
        try:
            await super().run(instruction, environment, context)  # type: ignore[misc]
        finally:
            await self._collect_token_record()
            self._after_token_record(context)

    def _after_token_record(self, context: AgentContext) -> None:
        """Hook for agents that need more than populate_context_post_run."""

    async def _collect_token_record(self) -> None:
        if not self._trajectory_url:
            return
        self._record = await fetch_session_record(self._trajectory_url)
        if self._record is None:
            self.logger.warning(f"proxy gave no session record at {self._trajectory_url}")
            return
        # The raw record too: it holds the merged segments (masks) the trainer reads.
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        drop_symlinks(self.logs_dir)  # the agent may have planted links to host files
        (self.logs_dir / TOKEN_RECORD_FILE).write_text(json.dumps(self._record))
        self._write_token_trajectory()

    def _write_token_trajectory(self) -> None:
        if self._record is None or not calls_of(self._record):
            return
        model = getattr(self, "model_name", None)
        write_token_trajectory(self.logs_dir, self._record, scaffold=self._scaffold, model_name=model,
                               agent_version=str(self.version() or "unknown"),  # type: ignore[attr-defined]
                               instruction=self._instruction)

    def populate_context_post_run(self, context: AgentContext) -> None:
        # The agent's own conversion (from its native logs) may have just written
        # trajectory.json; keep it aside and put the token-exact one in its place.
        super().populate_context_post_run(context)  # type: ignore[misc]
        self._write_token_trajectory()
        fill_rollout_details(context, self._record)


def fill_rollout_details(context: AgentContext, record: dict[str, Any] | None) -> None:
    """harbor's own place for token ids (result.json agent_result.rollout_details), one
    entry per proxy call, unless the agent filled it itself."""
    calls = calls_of(record or {})
    if not calls or any(context.rollout_details or []):
        return
    context.rollout_details = [{
        "prompt_token_ids": [c["prompt_ids"] for c in calls],
        "completion_token_ids": [c["completion_ids"] for c in calls],
        "logprobs": [c["logprobs"] for c in calls],
    }]
    if context.n_input_tokens is None:
        context.n_input_tokens = sum(len(c["prompt_ids"]) for c in calls)
    if context.n_output_tokens is None:
        context.n_output_tokens = sum(len(c["completion_ids"]) for c in calls)


class ClaudeCodeAgent(TokenRecordMixin, ClaudeCode):
    pass


class OpenCodeAgent(TokenRecordMixin, OpenCode):
    pass


class OpenHandsSDKAgent(TokenRecordMixin, OpenHandsSDK):
    def get_version_command(self) -> str | None:
        # harbor's check imports the SDK (~6 s per trial); the package metadata says the same.
        return (f"{OHSDK_PYTHON} -c 'import importlib.metadata as m; print(m.version(\"openhands-sdk\"))'"
                " 2>/dev/null")


def end_episode_on_exhausted_budget(llm: Any) -> None:
    """A spent session budget ends the episode at once.

    harbor's LiteLLM retries any 400 three times with 4-15 s waits, and Terminus-2 retries that
    three times again, so a trial whose budget ran out waited ~30 s on refusals that could only
    repeat. The proxy's refusal becomes harbor's ContextLengthExceededError inside the retried
    call: neither layer retries it, and with summarisation off Terminus-2 ends the episode. The
    outcome still comes from the proxy's record (call_limit / response_budget)."""
    handle = getattr(llm, "_handle_litellm_error", None)
    if handle is None:
        return

    def handle_exhausted_budget(error: Exception) -> Any:
        if BUDGET_EXHAUSTED in str(error):
            raise ContextLengthExceededError(f"the proxy refused the call: {error}") from error
        return handle(error)

    llm._handle_litellm_error = handle_exhausted_budget


# How Terminus-2 (harbor 0.25-0.26) re-asks after a reply cut at max_tokens: "NONE of the actions ... performed"
TRUNCATED_PROMPT = "ERROR!! NONE of the actions you just requested were performed because you exceeded"


class InvalidAnswersError(ContextLengthExceededError):
    """The policy's last answers did not parse as the scaffold's format: the episode ends.

    A ContextLengthExceededError only so that no retry repeats it: harbor's LiteLLM and Terminus-2's
    `_query_llm` retry every other error (three times each, one new generation each). The trial
    records it by its own name, graded as the agent's fault."""


class TerminusAgent(TokenRecordMixin, Terminus2):
    """Terminus-2, with two ends to an episode that can only go on wasting tokens: a spent session
    budget (`end_episode_on_exhausted_budget`), and `max_invalid_answers` answers in a row that do
    not parse as Terminus-2's JSON (None: never). Harbor answers an unparseable answer with the parse
    error and asks again; a policy that went off track (a tiny one after one wrong token) then writes
    unparseable answers until its token budget runs out, which was most of a step's tokens. An answer
    cut at the call's max_tokens counts as unparseable: harbor re-asks for it until the context is full."""

    MAX_INVALID_ANSWERS = 2

    def __init__(self, *args: Any, rlkit_max_invalid_answers: int | None = MAX_INVALID_ANSWERS,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        end_episode_on_exhausted_budget(getattr(self, "_llm", None))
        self._max_invalid = rlkit_max_invalid_answers
        self._invalid_in_a_row = 0

    async def _query_llm(self, chat: Any, prompt: str, *args: Any, **kwargs: Any) -> Any:
        # Terminus-2 answers a reply cut at the call's max_tokens by asking again, with no limit, until
        # the context is full: a truncated answer counts as an invalid one (~40 calls a trial before).
        if prompt.startswith(TRUNCATED_PROMPT):
            self._invalid_in_a_row += 1
            if self._max_invalid is not None and self._invalid_in_a_row >= self._max_invalid:
                raise InvalidAnswersError(f"{self._invalid_in_a_row} answers in a row did not parse as Terminus-2 "
                                          "JSON (the last ones were cut at the call's max_tokens)")
        return await super()._query_llm(chat, prompt, *args, **kwargs)

    async def _handle_llm_interaction(self, *args: Any, **kwargs: Any) -> Any:
        result = await super()._handle_llm_interaction(*args, **kwargs)
        feedback = result[2]
        self._invalid_in_a_row = self._invalid_in_a_row + 1 if str(feedback).startswith("ERROR:") else 0
        if self._max_invalid is not None and self._invalid_in_a_row >= self._max_invalid:
            raise InvalidAnswersError(f"{self._invalid_in_a_row} answers in a row did not parse as Terminus-2 JSON "
                                      f"(the last: {str(feedback)[:200]})")
        return result

    def _after_token_record(self, context: AgentContext) -> None:
        # Terminus-2 fills the context during its run, so harbor never calls
        # populate_context_post_run for it: add the ids here.
        fill_rollout_details(context, self._record)
