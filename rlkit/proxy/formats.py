"""OpenAI Chat Completions and Anthropic Messages wire formats (responses, SSE, errors).

Generation is not streamed token by token: the proxy needs the whole completion to
parse tool calls, so streaming answers are emitted as SSE events after generation,
in the exact event sequence each API's clients expect.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from rlkit.proxy.core import ChatResult
from rlkit.proxy.toolcalls import new_call_id

_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


# --- OpenAI -----------------------------------------------------------------------------------------

def openai_response(result: ChatResult, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.content or None}
    if result.tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in result.tool_calls]
    elif message["content"] is None:
        message["content"] = ""
    return {
        "id": new_call_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                  "total_tokens": result.prompt_tokens + result.completion_tokens},
    }


def _sse(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def new_stream_id(api: str) -> str:
    return new_call_id("chatcmpl-" if api == "openai" else "msg_")


def _openai_chunk(stream_id: str, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse({"id": stream_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})


def openai_stream_head(model: str, stream_id: str) -> bytes:
    return _openai_chunk(stream_id, model, {"role": "assistant", "content": ""})


OPENAI_KEEPALIVE = b": keepalive\n\n"  # an SSE comment: clients skip it, idle timeouts do not fire


def openai_stream(result: ChatResult, model: str, *, include_usage: bool = False, stream_id: str | None = None,
                  head: bool = True) -> list[bytes]:
    """The SSE events of a whole answer; `head=False` leaves out the opening chunk (already sent)."""
    stream_id = stream_id or new_stream_id("openai")
    base = {"id": stream_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _openai_chunk(stream_id, model, delta, finish)

    events = [openai_stream_head(model, stream_id)] if head else []
    if result.content:
        events.append(chunk({"content": result.content}))
    for i, call in enumerate(result.tool_calls):
        events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                             "function": {"name": call["name"], "arguments": ""}}]}))
        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call["arguments"]}}]}))
    events.append(chunk({}, result.finish_reason))
    if include_usage:
        events.append(_sse({**base, "choices": [], "usage": {
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}}))
    events.append(b"data: [DONE]\n\n")
    return events


def openai_stream_error(message: str, *, kind: str, code: str | None = None) -> bytes:
    return _sse(openai_error(message, kind=kind, code=code)) + b"data: [DONE]\n\n"


def openai_error(message: str, *, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# --- Anthropic --------------------------------------------------------------------------------------

def _anthropic_blocks(result: ChatResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if result.content:
        blocks.append({"type": "text", "text": result.content})
    for call in result.tool_calls:
        try:
            arguments = orjson.loads(call["arguments"]) if call["arguments"] else {}
        except orjson.JSONDecodeError:
            arguments = {"_raw": call["arguments"]}
        blocks.append({"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),
                       "name": call["name"], "input": arguments})
    return blocks


def anthropic_response(result: ChatResult, model: str) -> dict[str, Any]:
    return {
        "id": new_call_id("msg_"), "type": "message", "role": "assistant", "model": model,
        "content": _anthropic_blocks(result), "stop_reason": _ANTHROPIC_STOP[result.finish_reason],
        "stop_sequence": None,
        "usage": {"input_tokens": result.prompt_tokens, "output_tokens": result.completion_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def anthropic_stream_head(model: str, stream_id: str, prompt_tokens: int) -> bytes:
    start = {"id": stream_id, "type": "message", "role": "assistant", "model": model, "content": [],
             "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_creation_input_tokens": 0,
                       "cache_read_input_tokens": 0}}
    return _event("message_start", {"type": "message_start", "message": start})


ANTHROPIC_PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def anthropic_stream_error(message: str, *, kind: str) -> bytes:
    return _event("error", anthropic_error(message, kind=kind))


def anthropic_stream(result: ChatResult, model: str, *, stream_id: str | None = None,
                     head: bool = True) -> list[bytes]:
    """The SSE events of a whole answer; `head=False` leaves out message_start (already sent)."""
    stream_id = stream_id or new_stream_id("anthropic")
    message = anthropic_response(result, model)
    blocks = message.pop("content")
    events = [anthropic_stream_head(model, stream_id, result.prompt_tokens)] if head else []
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                         "content_block": {"type": "text", "text": ""}}))
            events.append(_event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                         "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            events.append(_event("content_block_start", {"type": "content_block_start", "index": i,
                                                         "content_block": {**block, "input": {}}}))
            events.append(_event("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}}))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(_event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                           "usage": {"output_tokens": result.completion_tokens}}))
    events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def anthropic_error(message: str, *, kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
