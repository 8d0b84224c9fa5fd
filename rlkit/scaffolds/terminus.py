"""`terminus`: harbor's Terminus-2, on the host, driving tmux inside the sandbox.

It calls the policy through litellm with api_base=<proxy>/s/<session>/v1 and model
`hosted_vllm/<model>`. Summarisation is off: it rewrites the history and breaks the
token record. Nothing is baked: the base image already has tmux and asciinema.
"""

from __future__ import annotations

from typing import Any

from rlkit.config.schema import AgentApi
from rlkit.scaffolds.base import Scaffold, ScaffoldRun


class TerminusScaffold(Scaffold):
    name = "terminus"
    description = "Terminus-2 on the host driving tmux in the sandbox (OpenAI chat completions)"
    agent_import_path = "rlkit.scaffolds._agents:TerminusAgent"
    api_format = AgentApi.OPENAI
    runs_in_container = False
    # The agent is on the host: the sandbox keeps the task's own network policy.
    network_mode = "task"
    supports_max_turns = True

    def model_name(self, run: ScaffoldRun) -> str:
        return f"hosted_vllm/{run.model}"

    def base_url(self, run: ScaffoldRun) -> str | None:
        return None  # passed as api_base, Terminus-2's own option

    def agent_kwargs(self, run: ScaffoldRun) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "api_base": run.openai_base_url(),
            "enable_summarize": False,
            "proactive_summarization_threshold": 0,
            # The proxy records ids itself; asking vLLM through it keeps harbor's own
            # rollout_details filled too.
            "collect_rollout_details": True,
            "session_id": run.session,
            "model_info": {"max_input_tokens": 32768, "max_output_tokens": 4096,
                           "input_cost_per_token": 0.0, "output_cost_per_token": 0.0},
            "record_terminal_session": False,
            "suppress_max_turns_warning": True,
        }
        if run.max_turns is not None:
            kwargs["max_turns"] = run.max_turns
        if run.temperature is not None:
            kwargs["temperature"] = run.temperature
        return kwargs
