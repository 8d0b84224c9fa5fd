"""Tool-call parsing through verl's parsers: on the proxy's loop, the decode they start with
is a finished future (no thread hop, no loop turn)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace

from rlkit.proxy.render import ChatRenderer, tools_key
from rlkit.proxy.toolcalls import ProxyEventLoop, VerlToolParser, _TokenizerView

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}}}}}]
CALL_TEXT = ("Running them.\n<tool_call>\n<function=bash>\n<parameter=command>\npytest -x\n</parameter>\n"
             "</function>\n</tool_call>")


def _decode_in_verl_module() -> str:
    return threading.current_thread().name


_decode_in_verl_module.__module__ = "verl.experimental.agent_loop.tool_parser"


def test_proxy_loop_runs_parser_decodes_inline_and_the_rest_on_threads() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        here = threading.current_thread().name
        decode = loop.run_in_executor(None, _decode_in_verl_module)
        assert decode.done() and decode.result() == here  # awaiting it never yields to the loop
        # hermes-style parsers hand over the (view's) bound decode itself
        view = _TokenizerView(SimpleNamespace(decode=lambda ids, **_: threading.current_thread().name))
        bound = loop.run_in_executor(None, view.decode, [1, 2])
        assert bound.done() and bound.result() == here
        assert await loop.run_in_executor(None, lambda: threading.current_thread().name) != here

    asyncio.run(scenario(), loop_factory=ProxyEventLoop)


def test_parse_reuses_the_proxys_decode_and_matches_the_threaded_path(tiny_model_dir: Path) -> None:
    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    ids = renderer.tokenizer.encode(CALL_TEXT, add_special_tokens=False)
    text = renderer.decode(ids)
    real_decodes: list[int] = []

    async def parse():
        parser = VerlToolParser("qwen3_coder", renderer.tokenizer)
        real = renderer.tokenizer.decode
        renderer.tokenizer.decode = lambda *a, **k: real_decodes.append(1) or real(*a, **k)
        try:
            return await parser.parse(ids, text, TOOLS, tools_key(TOOLS))
        finally:
            del renderer.tokenizer.decode

    threaded, inline = asyncio.run(parse()), asyncio.run(parse(), loop_factory=ProxyEventLoop)
    assert real_decodes == []  # verl's parser got the proxy's text, not a second decode
    assert not inline.parse_failure and inline.content == threaded.content == "Running them.\n"
    strip = [{k: v for k, v in c.items() if k != "id"} for c in inline.tool_calls]
    assert strip == [{"name": "bash", "arguments": '{"command": "pytest -x"}'}]
    assert strip == [{k: v for k, v in c.items() if k != "id"} for c in threaded.tool_calls]


def test_proxy_loop_is_uvloops() -> None:
    import uvloop

    assert issubclass(ProxyEventLoop, uvloop.Loop)


def test_tool_schemas_are_dumped_once_not_per_parse(tiny_model_dir: Path) -> None:
    """verl's XML parser dumps the called tool's parameter schemas on every call; ours are dumped once."""
    from pydantic import BaseModel

    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    ids = renderer.tokenizer.encode(CALL_TEXT.replace("pytest -x", "3"), add_special_tokens=False)
    typed = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {
        "type": "object", "properties": {"command": {"type": "integer"}}}}}]
    parser = VerlToolParser("qwen3_coder", renderer.tokenizer)
    dumps: list[int] = []
    real_dump = BaseModel.model_dump

    def counting_dump(self: BaseModel, *args: object, **kwargs: object) -> object:
        dumps.append(1)
        return real_dump(self, *args, **kwargs)

    async def parse_three_times() -> list:
        return [await parser.parse(ids, renderer.decode(ids), typed, tools_key(typed)) for _ in range(3)]

    BaseModel.model_dump = counting_dump
    try:
        results = asyncio.run(parse_three_times(), loop_factory=ProxyEventLoop)
    finally:
        BaseModel.model_dump = real_dump
    assert len(dumps) == 1  # when the tool list was first seen
    # The parameter's type still reaches the parser: "3" became the integer 3.
    assert all(r.tool_calls[0]["arguments"] == '{"command": 3}' for r in results)
