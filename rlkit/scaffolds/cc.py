"""`cc`: Claude Code CLI (npm `@anthropic-ai/claude-code`), in the sandbox, Anthropic Messages API.

Pointed at the proxy with ANTHROPIC_BASE_URL=<proxy>/s/<session> (the CLI appends
/v1/messages) and ANTHROPIC_MODEL=<served model>; harbor's class pins every model
alias (sonnet/opus/haiku) to it so sub-agents hit the same policy.
"""

from __future__ import annotations

from typing import Any

from rlkit.config.schema import AgentApi
from rlkit.scaffolds.base import PROXY_API_KEY, AgentImageRecipe, Scaffold, ScaffoldRun

CLAUDE_CODE_VERSION = "2.1.332"


class ClaudeCodeScaffold(Scaffold):
    name = "cc"
    description = "Claude Code CLI in the sandbox (Anthropic Messages through the proxy)"
    agent_import_path = "rlkit.scaffolds._agents:ClaudeCodeAgent"
    api_format = AgentApi.ANTHROPIC
    supports_max_turns = True
    # The npm package ships a native binary per platform (no node needed in the image).
    image_recipe = AgentImageRecipe(
        npm_package="@anthropic-ai/claude-code", npm_version=CLAUDE_CODE_VERSION,
        npm_binary="node_modules/@anthropic-ai/claude-code-linux-x64/claude",
        links={"claude": "claude"},
    )

    def model_name(self, run: ScaffoldRun) -> str:
        return f"anthropic/{run.model}"

    def agent_env(self, run: ScaffoldRun) -> dict[str, str]:
        return {"ANTHROPIC_API_KEY": PROXY_API_KEY}

    def agent_kwargs(self, run: ScaffoldRun) -> dict[str, Any]:
        # The version check (`claude --version`) makes a baked agent cost nothing per trial.
        kwargs: dict[str, Any] = {"skip_install": True, "version": CLAUDE_CODE_VERSION}
        if run.max_turns is not None:
            kwargs["max_turns"] = run.max_turns
        return kwargs
