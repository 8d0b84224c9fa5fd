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
