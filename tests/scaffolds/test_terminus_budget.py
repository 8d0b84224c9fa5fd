"""Terminus-2 stops at once when the proxy refuses a call for a spent session budget.

The real proxy in front of a scripted stand-in for vLLM (no model needed: the refusal happens in
the proxy, before any generation), and harbor's own LiteLLM client as TerminusAgent builds it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.proxy.test_proxy_server import proxy_on

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def test_a_spent_budget_ends_the_episode_without_retries(tiny_model_dir: Path, tmp_path: Path) -> None:
    """harbor retried the refusal 3 x 3 times with 4-15 s waits (~30 s a trial); now one refusal ends it."""
    from harbor.llms.base import ContextLengthExceededError

    from rlkit.scaffolds import ScaffoldRun, get_scaffold
    from rlkit.scaffolds._agents import TerminusAgent

    async def body() -> int:
        async with proxy_on(tiny_model_dir, replies=["done"]) as (proxy, [fake]):
            proxy.core.config.max_calls_per_session = 1
            run = ScaffoldRun(session="budget", model="tiny", proxy_url=proxy.url)
            scaffold = get_scaffold("terminus")
            agent = TerminusAgent(logs_dir=tmp_path, model_name=scaffold.model_name(run),
                                  **scaffold.agent_kwargs(run))
            first = await agent._llm.call(prompt="hi", message_history=[])
            assert first.content.strip() == "done"
            with pytest.raises(ContextLengthExceededError, match="session_budget_exceeded"):
                await agent._llm.call(prompt="again", message_history=[{"role": "user", "content": "hi"},
                                                                         {"role": "assistant", "content": "done"}])
            assert len(fake.requests) == 1
            assert proxy.trajectory("budget")["reasons"] == ["call_limit"]
            return int(proxy.core.stats["budget_exhausted"])

    assert asyncio.run(body()) == 1  # refused once, never asked again


def test_answers_that_stop_parsing_end_the_episode(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A policy off track writes unparseable answers until its budget runs out; two in a row end it.
    A valid answer between them resets the count."""
    from harbor.llms.chat import Chat

    from rlkit.scaffolds import ScaffoldRun, get_scaffold
    from rlkit.scaffolds._agents import InvalidAnswersError, TerminusAgent

    valid = '{"analysis": "a", "plan": "p", "commands": [], "task_complete": false}'
    answers = ["not json at all", valid, "{broken", '{"analysis": "x", "plan"']

    async def body() -> int:
        async with proxy_on(tiny_model_dir, replies=answers) as (proxy, [fake]):
            run = ScaffoldRun(session="junk", model="tiny", proxy_url=proxy.url)
            scaffold = get_scaffold("terminus")
            agent = TerminusAgent(logs_dir=tmp_path, model_name=scaffold.model_name(run), **scaffold.agent_kwargs(run))
            chat = Chat(agent._llm)
            for _ in range(3):  # junk (1), valid (0), junk (1)
                await agent._handle_llm_interaction(chat, "go")
            with pytest.raises(InvalidAnswersError, match="2 answers in a row"):
                await agent._handle_llm_interaction(chat, "go")
            return len(fake.requests)

    assert asyncio.run(body()) == 4


def test_answers_cut_at_max_tokens_end_the_episode(tiny_model_dir: Path, tmp_path: Path) -> None:
    """harbor's Terminus-2 answers a reply cut at the call's max_tokens ("NONE of the actions ... were
    performed") by asking again, with no limit: with --max-call-tokens 48 a tiny policy's trial made ~40
    calls and ran 70-120 s until the context was full. Two cut answers in a row now end it."""
    from harbor.llms.chat import Chat

    from rlkit.scaffolds import ScaffoldRun, get_scaffold
    from rlkit.scaffolds._agents import InvalidAnswersError, TerminusAgent

    async def body() -> int:
        async with proxy_on(tiny_model_dir, replies=['{"analysis": "a long', '{"analysis": "longer'],
                            finish_reason="length") as (proxy, [fake]):
            run = ScaffoldRun(session="cut", model="tiny", proxy_url=proxy.url)
            scaffold = get_scaffold("terminus")
            agent = TerminusAgent(logs_dir=tmp_path, model_name=scaffold.model_name(run), **scaffold.agent_kwargs(run))
            with pytest.raises(InvalidAnswersError, match="cut at the call's max_tokens"):
                await agent._handle_llm_interaction(Chat(agent._llm), "go")
            return len(fake.requests)

    assert asyncio.run(body()) == 2
