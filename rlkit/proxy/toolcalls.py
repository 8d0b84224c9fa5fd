"""Tool-call parsing of completions with verl's parsers, plus the parse-failure flag.

A completion that carries tool-call markup the configured parser cannot turn into
calls (typically TOOL_CALL_PARSER not matching the chat template) is flagged, so
training can mask it instead of learning from a turn the agent never saw as a call.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

# Markers that show a completion tried to call a tool, across the parsers verl ships.
TOOL_MARKUP = ("<tool_call>", "<function=", "<|tool_call", "<tool_calls>", "<|tool_calls_section_begin|>",
               "<｜tool▁calls▁begin｜>", "to=functions.", "<seed:tool_call>", "<minimax:tool_call>")


@dataclass(slots=True)
class ParsedCompletion:
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments" (json str)}]
    parse_failure: bool = False


def markup_count(text: str) -> int:
    return max(text.count(marker) for marker in TOOL_MARKUP)


def new_call_id(prefix: str = "call_") -> str:
    """A unique id for a tool call or response (unique, not secret: no system call per id)."""
    return f"{prefix}{random.getrandbits(96):024x}"


class ToolCallParser:
    """Wraps `verl...ToolParser.get_tool_parser(name, tokenizer)` (imported lazily: it pulls in ray/torch)."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        from verl.experimental.agent_loop.tool_parser import ToolParser

        try:
            self._parser = ToolParser.get_tool_parser(name, tokenizer)
        except ValueError as exc:
            from rlkit.errors import UserError

            known = ", ".join(sorted(ToolParser._registry))
            raise UserError(f"unknown tool-call parser {name!r}", key="TOOL_CALL_PARSER",
                            fix=f"use one of: {known}") from exc
        self.name = name
        self._tool_schemas: dict[bytes, Any] = {}

    def _schemas(self, tools: list[dict[str, Any]] | None, key: bytes) -> Any:
        if not tools:
            return None
        if key not in self._tool_schemas:
            from verl.tools.schemas import OpenAIFunctionToolSchema

            schemas = []
            for tool in tools:
                try:
                    schemas.append(OpenAIFunctionToolSchema.model_validate(tool))
                except Exception:  # noqa: BLE001, S112 - a schema verl cannot model only loses argument typing
                    continue
            self._tool_schemas[key] = schemas
        return self._tool_schemas[key]

    async def parse(self, completion_ids: list[int], text: str, tools: list[dict[str, Any]] | None,
                    tools_key: bytes) -> ParsedCompletion:
        expected = markup_count(text) if tools else 0
        if not tools or expected == 0:
            return ParsedCompletion(content=text)
        try:
            content, calls = await self._parser.extract_tool_calls(completion_ids, self._schemas(tools, tools_key))
        except Exception:  # noqa: BLE001 - a parser crash on model output is a parse failure, not a 500
            return ParsedCompletion(content=text, parse_failure=True)
        parsed = [{"id": new_call_id(), "name": c.name, "arguments": c.arguments} for c in calls]
        # Fewer calls than opening markers: some markup was not understood.
        failure = len(parsed) == 0 or len(parsed) < text.count("<tool_call>")
        return ParsedCompletion(content=content if parsed else text, tool_calls=parsed, parse_failure=failure)
