"""`ohsdk`: OpenHands Software Agent SDK, in the sandbox, OpenAI Chat Completions via litellm.

harbor runs its runner script with /opt/openhands-sdk-venv/bin/python and sets
LLM_BASE_URL=<proxy>/s/<session>/v1, LLM_MODEL=openai/<model>, LLM_API_KEY.
The SDK needs Python >= 3.12 while the bookworm base has 3.11, so the baked layer
carries its own CPython 3.12 (/opt/rlkit-agents/ohsdk/python) and the venv.
"""

from __future__ import annotations

from typing import Any

from rlkit.config.schema import AgentApi
from rlkit.scaffolds.base import PROXY_API_KEY, AgentImageRecipe, Scaffold, ScaffoldRun

OPENHANDS_SDK_VERSION = "1.58.2"
OHSDK_VENV = "/opt/openhands-sdk-venv"
# litellm inside the SDK must not fetch its cost map from the internet.
OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENHANDS_SUPPRESS_BANNER": "1"}


class OpenHandsSDKScaffold(Scaffold):
    name = "ohsdk"
    description = "OpenHands SDK agent in the sandbox (OpenAI chat completions through the proxy)"
    agent_import_path = "rlkit.scaffolds._agents:OpenHandsSDKAgent"
    api_format = AgentApi.OPENAI
    supports_max_turns = True
    image_recipe = AgentImageRecipe(
        pip_requirements=(f"openhands-sdk=={OPENHANDS_SDK_VERSION}", f"openhands-tools=={OPENHANDS_SDK_VERSION}",
                          "fastapi"),
        offline_env=OFFLINE_ENV,
    )

    def model_name(self, run: ScaffoldRun) -> str:
        return f"openai/{run.model}"

    def agent_env(self, run: ScaffoldRun) -> dict[str, str]:
        return {"LLM_API_KEY": PROXY_API_KEY, **OFFLINE_ENV}

    def agent_kwargs(self, run: ScaffoldRun) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"skip_install": True, "load_skills": False}
        if run.max_turns is not None:
            kwargs["max_iterations"] = run.max_turns
        if run.temperature is not None:
            kwargs["temperature"] = run.temperature
        return kwargs
