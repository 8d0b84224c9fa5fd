"""Tool-call parsing of completions with verl's parsers, plus the parse-failure flag.

A completion that carries tool-call markup the configured parser cannot turn into
calls (typically TOOL_CALL_PARSER not matching the chat template) is flagged, so
training can mask it instead of learning from a turn the agent never saw as a call.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

_VERL_PARSERS = "verl.experimental.agent_loop.tool_parser"

try:  # libuv's loop: per call it runs far less Python than asyncio's own, which counts on a cold CPU
    from uvloop import Loop as _BaseLoop
except ImportError:  # pragma: no cover - uvloop comes with the proxy extra
    _BaseLoop = asyncio.SelectorEventLoop

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


def _is_parser_decode(fn: Any) -> bool:
    """The decode verl's parsers send to the executor: our tokenizer view's, bound or in one of their lambdas."""
    return isinstance(getattr(fn, "__self__", None), _TokenizerView) or getattr(fn, "__module__", None) == _VERL_PARSERS


class ProxyEventLoop(_BaseLoop):
    """The proxy's event loop (uvloop's where installed): verl's parsers' decodes run inline.

    verl's parsers decode a completion (a few hundred ids, microseconds; here the proxy's own
    text is handed back) on the default executor. The hop to a thread and back, plus the loop
    turn that delivers its result, cost more than the parse itself on every call with a tool
    call. Every other `run_in_executor` goes to threads as usual.
    """

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future:
        if executor is not None or not _is_parser_decode(func):
            return super().run_in_executor(executor, func, *args)
        done = self.create_future()
        try:
            done.set_result(func(*args))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting parser, as a thread would
            done.set_exception(exc)
        return done


class _TokenizerView:
    """The tokenizer as verl's parser sees it: decoding the ids the proxy just decoded returns that text.

    Every verl parser starts by decoding the completion; the proxy has already done so.
    Any other call, or other ids, goes to the real tokenizer.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] | None = None
        self._text = ""

    def remember(self, ids: list[int], text: str) -> None:
        self._ids, self._text = ids, text

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if ids is self._ids and not skip_special_tokens and not kwargs:
            return self._text
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class _DumpedOnce:
    """A tool parameter's schema whose `model_dump()` is computed once, not on every parsed call.

    verl's XML parsers dump every parameter of the called tool's schema per call to read its type.
    """

    __slots__ = ("_dump", "_model")

    def __init__(self, model: Any) -> None:
        self._model = model
        self._dump = model.model_dump()

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if args or kwargs:
            return self._model.model_dump(*args, **kwargs)
        return self._dump  # read only: the parser looks up each parameter's type

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class VerlToolParser:
    """Wraps `verl...ToolParser.get_tool_parser(name, tokenizer)` (imported lazily: it pulls in ray/torch)."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        from verl.experimental.agent_loop.tool_parser import ToolParser

        self._tokenizer = _TokenizerView(tokenizer)
        try:
            self._parser = ToolParser.get_tool_parser(name, self._tokenizer)
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
                    schema = OpenAIFunctionToolSchema.model_validate(tool)
                except Exception:  # noqa: BLE001, S112 - a schema verl cannot model only loses argument typing
                    continue
                properties = schema.function.parameters.properties
                for name, prop in properties.items():
                    properties[name] = _DumpedOnce(prop)
                schemas.append(schema)
            self._tool_schemas[key] = schemas
        return self._tool_schemas[key]

    async def parse(self, completion_ids: list[int], text: str, tools: list[dict[str, Any]] | None,
                    tools_key: bytes) -> ParsedCompletion:
        """`text` is the completion decoded with special tokens kept (what verl's parsers decode)."""
        expected = markup_count(text) if tools else 0
        if not tools or expected == 0:
            return ParsedCompletion(content=text)
        self._tokenizer.remember(completion_ids, text)
        try:
            content, calls = await self._parser.extract_tool_calls(completion_ids, self._schemas(tools, tools_key))
        except Exception:  # noqa: BLE001 - a parser crash on model output is a parse failure, not a 500
            return ParsedCompletion(content=text, parse_failure=True)
        parsed = [{"id": new_call_id(), "name": c.name, "arguments": c.arguments} for c in calls]
        # Fewer calls than opening markers: some markup was not understood.
        failure = len(parsed) == 0 or len(parsed) < text.count("<tool_call>")
        return ParsedCompletion(content=content if parsed else text, tool_calls=parsed, parse_failure=failure)
