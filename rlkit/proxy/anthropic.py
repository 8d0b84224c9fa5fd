"""Anthropic Messages requests -> OpenAI chat messages, via litellm's adapter.

litellm's `translate_anthropic_to_openai` is cheap (~0.1 ms per request measured here)
and covers the format's corners (tool_result blocks -> role "tool", system blocks,
images, tool-name shortening). rlkit adds what matters for token-exact recording:
Claude Code's per-request billing header is stripped from the system text (it changes
between calls and would break every prefix), and thinking blocks are dropped.
"""

from __future__ import annotations

import os
import re
from typing import Any

_BILLING_LINE = re.compile(r"^x-anthropic-billing-header:[^\n]*\n?", re.MULTILINE)
_adapter: Any = None


def _get_adapter() -> Any:
    global _adapter
    if _adapter is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network on import
        import litellm
        from litellm.llms.anthropic.messages.adapters.transformation import LiteLLMAnthropicMessagesAdapter

        litellm.suppress_debug_info = True
        _adapter = LiteLLMAnthropicMessagesAdapter()
    return _adapter


def warm_up() -> None:
    """Import litellm ahead of the first request (it takes seconds)."""
    _get_adapter()


def _strip_billing(system: Any) -> Any:
    if isinstance(system, str):
        return _BILLING_LINE.sub("", system)
    if isinstance(system, list):
        out = []
        for block in system:
            if isinstance(block, dict) and block.get("type") == "text":
                text = _BILLING_LINE.sub("", block.get("text", ""))
                if not text.strip():
                    continue
                block = {**block, "text": text}
            out.append(block)
        return out
    return system


def to_openai(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, str]]:
    """(messages, tools, tool-name mapping openai->anthropic) of an Anthropic request."""
    body = dict(body)
    if "system" in body:
        body["system"] = _strip_billing(body["system"])
    body.setdefault("model", "rlkit")
    translated, name_map = _get_adapter().translate_anthropic_to_openai(body)
    if hasattr(translated, "model_dump"):
        translated = translated.model_dump(exclude_none=True)
    messages = []
    for message in translated.get("messages", []):
        message = dict(message) if not hasattr(message, "model_dump") else message.model_dump(exclude_none=True)
        message.pop("thinking_blocks", None)
        message.pop("reasoning_content", None)
        messages.append(message)
    tools = [dict(t) if not hasattr(t, "model_dump") else t.model_dump(exclude_none=True)
             for t in translated.get("tools") or []]
    return messages, tools or None, dict(name_map or {})


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stop_sequences"):
        out["stop"] = list(body["stop_sequences"])
    return out
