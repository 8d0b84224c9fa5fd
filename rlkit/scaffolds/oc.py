"""`oc`: OpenCode CLI (npm `opencode-ai`), in the sandbox, OpenAI Chat Completions.

harbor's class writes ~/.config/opencode/opencode.json with a provider `rlkit` whose
`options.baseURL` is <proxy>/s/<session>/v1, and runs `opencode --model=rlkit/<model>`.
"""

from __future__ import annotations

from typing import Any

from rlkit.config.schema import AgentApi
from rlkit.scaffolds.base import PROXY_API_KEY, AgentImageRecipe, Scaffold, ScaffoldRun

OPENCODE_VERSION = "1.18.33"
PROVIDER = "rlkit"


class OpenCodeScaffold(Scaffold):
    name = "oc"
    description = "OpenCode CLI in the sandbox (OpenAI chat completions through the proxy)"
    agent_import_path = "rlkit.scaffolds._agents:OpenCodeAgent"
    api_format = AgentApi.OPENAI
    image_recipe = AgentImageRecipe(
        npm_package="opencode-ai", npm_version=OPENCODE_VERSION,
        npm_binary="node_modules/opencode-linux-x64/bin/opencode",
        links={"opencode": "opencode"},
    )

    def model_name(self, run: ScaffoldRun) -> str:
        return f"{PROVIDER}/{run.model}"

    def agent_env(self, run: ScaffoldRun) -> dict[str, str]:
        return {"OPENAI_API_KEY": PROXY_API_KEY}

    def agent_kwargs(self, run: ScaffoldRun) -> dict[str, Any]:
        return {
            "skip_install": True, "version": OPENCODE_VERSION,
            "model_api_format": "openai_chat_completions",
            # opencode's own updater and share features would reach the internet; its
            # hidden title agent would add a side call (a separate token segment) per trial.
            "opencode_config": {"autoupdate": False, "share": "disabled",
                                "agent": {"title": {"disable": True}}},
        }
