"""Tool-call parsing of completions with verl's parsers, plus the parse-failure flag.

A completion that carries tool-call markup the configured parser cannot turn into
calls (typically TOOL_CALL_PARSER not matching the chat template) is flagged, so
training can mask it instead of learning from a turn the agent never saw as a call.
"""

from __future__ import annotations

import uuid
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
    return prefix + uuid.uuid4().hex[:24]


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


@dataclass(slots=True)
class ParserCheck:
    ok: bool
    detail: str
    rendered_call: str = ""


_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
_PROBE_ARGS = {"command": "ls -la /tmp"}


async def check_parser_matches_template(renderer: Any, parser: ToolCallParser) -> ParserCheck:
    """Render a tool call with the model's own chat template and parse it back with the parser.

    The proxy generates in the template's format, so a parser that cannot read the
    template's own tool calls will miss every call the model makes (TOOL_CALL_PARSER typo).
    """
    import json

    from rlkit.proxy.render import tools_key

    user = [{"role": "user", "content": "list /tmp"}]
    reply = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "probe", "type": "function", "function": {"name": "run_shell", "arguments": json.dumps(_PROBE_ARGS)}}]}
    prompt = renderer.render_text(user, _PROBE_TOOLS)
    whole = renderer.render_text(user + [reply], _PROBE_TOOLS, add_generation_prompt=False)
    if not whole.startswith(prompt.rstrip()):
        return ParserCheck(False, "the chat template re-renders earlier turns; cannot isolate the tool call")
    call_text = whole[len(prompt.rstrip()):]
    call_text = call_text.split(renderer.eos_text)[0].lstrip("\n")
    if "run_shell" not in call_text:
        return ParserCheck(False, "the chat template does not render assistant tool calls", call_text)
    ids = renderer.encode_text(call_text)
    parsed = await parser.parse(ids, renderer.decode(ids), _PROBE_TOOLS, tools_key(_PROBE_TOOLS))
    calls = [(c["name"], json.loads(c["arguments"] or "{}")) for c in parsed.tool_calls]
    if calls == [("run_shell", _PROBE_ARGS)]:
        return ParserCheck(True, f"parser {parser.name!r} reads the template's tool calls", call_text)
    return ParserCheck(False, f"parser {parser.name!r} cannot read the chat template's tool-call format "
                              f"(parsed {calls or 'nothing'})", call_text)
