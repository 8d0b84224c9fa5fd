"""The proxy over HTTP against a scripted upstream: formats, recording, errors, routing, hygiene."""
# ruff: noqa: SIM117 - the client is built from the proxy that the outer block starts

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from rlkit.proxy import ProxyConfig, ProxyServer, session_for_api_key
from tests.proxy._fake_vllm import FakeVllm

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                          "required": ["cmd"]}}}]
ANTHROPIC_TOOLS = [{"name": "bash", "description": "run a command",
                    "input_schema": TOOLS[0]["function"]["parameters"]}]
QWEN_CALL = "<tool_call>\n<function=bash>\n<parameter=cmd>\nls -la\n</parameter>\n</function>\n</tool_call>"
HERMES_CALL = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def proxy_on(model_dir: Path, replies: list[str] | None = None, *, upstreams: int = 1,
                   parser: str = "qwen3_coder", max_model_len: int = 8192,
                   finish_reason: str = "stop", served_len: int | None = None, delay_s: float = 0.0,
                   status: int = 200, keepalive_s: float = 10.0,
                   text: Any = None, warm_anthropic: bool = True) -> AsyncIterator[tuple[ProxyServer, list[FakeVllm]]]:
    """A proxy on a free port in front of scripted upstreams that answer `replies` in turn (+ end-of-turn)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    queue = list(replies or ["ok"])

    def reply(prompt: list[int], body: dict[str, Any]) -> list[int]:
        text = queue.pop(0) if len(queue) > 1 else queue[0]
        ids = tok.encode(text, add_special_tokens=False)
        return ids if finish_reason == "length" else ids + [tok.eos_token_id]

    fakes = [FakeVllm(reply, max_model_len=served_len or max_model_len, finish_reason=finish_reason,
                      delay_s=delay_s, status=status, text=text) for _ in range(upstreams)]
    async with contextlib.AsyncExitStack() as stack:
        for fake in fakes:
            await stack.enter_async_context(fake.running())
        config = ProxyConfig(model_path=str(model_dir), upstreams=[f.base_url for f in fakes], port=0,
                             served_model_name="tiny", tool_call_parser=parser, max_model_len=max_model_len,
                             stream_keepalive_s=keepalive_s, warm_anthropic=warm_anthropic)
        async with ProxyServer(config) as proxy:
            yield proxy, fakes


def sse_data(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_openai_tool_call_then_tool_result_is_one_segment(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, [QWEN_CALL, "done"]) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("t1")) as client:
                messages: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
                first = (await client.post("/chat/completions", json={"model": "m", "messages": messages,
                                                                       "tools": TOOLS})).json()
                choice = first["choices"][0]
                assert choice["finish_reason"] == "tool_calls"
                [tc] = choice["message"]["tool_calls"]
                assert tc["function"]["name"] == "bash"
                assert orjson.loads(tc["function"]["arguments"]) == {"cmd": "ls -la"}
                messages += [choice["message"], {"role": "tool", "tool_call_id": tc["id"], "content": "a.txt"}]
                second = (await client.post("/chat/completions", json={"model": "m", "messages": messages,
                                                                        "tools": TOOLS})).json()
                assert second["choices"][0]["message"]["content"] == "done"
                compact = (await client.get(proxy.session_url("t1") + "/trajectory?calls=delta")).json()
            # The second prompt sent to vLLM is the first prompt + the sampled ids + the new turn, verbatim.
            p0, p1 = fake.requests[0]["prompt"], fake.requests[1]["prompt"]
            traj = proxy.trajectory("t1")
            c0 = traj["calls"][0]
            assert p1[:len(p0) + len(c0["completion_ids"])] == p0 + c0["completion_ids"]
            assert traj["num_segments"] == 1 and traj["num_breaks"] == 0
            [seg] = traj["segments"]
            n0, n1 = len(c0["completion_ids"]), len(traj["calls"][1]["completion_ids"])
            inserted = len(p1) - len(p0) - n0
            assert seg["prompt_ids"] == p0
            assert seg["response_mask"] == [1] * n0 + [0] * inserted + [1] * n1
            assert seg["response_logprobs"][n0:n0 + inserted] == [0.0] * inserted
            assert traj["calls"][0]["tool_calls"][0]["name"] == "bash"
            # The compact form stores only the ids after the parent call.
            assert compact["calls"][1]["parent"] == 0
            assert compact["calls"][1]["prompt_ids"] == p1[len(p0) + n0:]
            final = proxy.close_session("t1", calls="none")
            assert "calls" not in final and final["closed"] and proxy.trajectory("t1") is None
    run(body())


def test_openai_streaming_format(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, [QWEN_CALL]) as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("s")) as client:
                resp = await client.post("/chat/completions", json={
                    "model": "m", "stream": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "go"}], "tools": TOOLS})
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.text.rstrip().endswith("data: [DONE]")
        chunks = sse_data(resp.text)
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        deltas = [d for c in chunks for ch in c["choices"] for d in ch["delta"].get("tool_calls", [])]
        assert deltas[0]["id"].startswith("call_") and deltas[0]["function"]["name"] == "bash"
        args = "".join(d["function"].get("arguments", "") for d in deltas if d["index"] == 0)
        assert orjson.loads(args) == {"cmd": "ls -la"}
        finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
        assert finishes == ["tool_calls"]
        assert chunks[-1]["usage"]["completion_tokens"] > 0
    run(body())


def test_the_anthropic_adapter_is_imported_at_start_or_at_the_first_anthropic_request(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.proxy import anthropic

    warmed: list[bool] = []
    monkeypatch.setattr(anthropic, "warm_up", lambda: warmed.append(True))

    async def body(warm: bool) -> None:
        async with proxy_on(tiny_model_dir, ["hi"], warm_anthropic=warm) as (proxy, _):
            assert warmed == ([True] if warm else [])
            async with httpx.AsyncClient(base_url=proxy.anthropic_base_url("cc")) as client:
                answer = await client.post("/v1/messages", json={"model": "m", "max_tokens": 16,
                                                                 "messages": [{"role": "user", "content": "x"}]})
            assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "hi"
        warmed.clear()

    run(body(False))
    run(body(True))


def test_anthropic_messages_tool_use_and_streaming(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, [QWEN_CALL, "all done"]) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.anthropic_base_url("cc")) as client:
                request: dict[str, Any] = {
                    "model": "claude-x", "max_tokens": 64, "tools": ANTHROPIC_TOOLS,
                    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1.0.1; a=b"},
                               {"type": "text", "text": "You are helpful."}],
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "list"}]}]}
                first = (await client.post("/v1/messages?beta=true", json=request)).json()
                assert first["type"] == "message" and first["stop_reason"] == "tool_use"
                [use] = first["content"]
                assert use["type"] == "tool_use" and use["name"] == "bash" and use["input"] == {"cmd": "ls -la"}
                assert use["id"].startswith("toolu_")
                # Claude Code changes the billing header every call; it must not break the prefix.
                request["system"][0]["text"] = "x-anthropic-billing-header: cc_version=1.0.1; a=c"
                request["messages"] += [
                    {"role": "assistant", "content": first["content"]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                                  "content": "a.txt"}]}]
                resp = await client.post("/v1/messages", json={**request, "stream": True})
                counted = (await client.post("/v1/messages/count_tokens", json=request)).json()
        events = re.findall(r"^event: (\S+)$", resp.text, flags=re.MULTILINE)
        assert events == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                          "message_delta", "message_stop"]
        data = sse_data(resp.text)
        assert data[2]["delta"] == {"type": "text_delta", "text": "all done"}
        assert data[4]["delta"]["stop_reason"] == "end_turn"
        assert counted["input_tokens"] > 0
        traj = proxy.trajectory("cc")
        assert traj["num_segments"] == 1 and traj["num_breaks"] == 0
        sent = proxy.core.renderer.decode(fake.requests[0]["prompt"])
        assert "billing-header" not in sent and "You are helpful." in sent
    run(body())


def test_parser_mismatch_is_recorded_as_parse_failure(tiny_hermes_model_dir: Path) -> None:
    """A hermes-template model served with TOOL_CALL_PARSER=qwen3_coder: calls are not understood."""
    async def body() -> None:
        async with proxy_on(tiny_hermes_model_dir, [HERMES_CALL], parser="qwen3_coder") as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("mm")) as client:
                resp = (await client.post("/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS})).json()
        choice = resp["choices"][0]
        assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
        assert "<tool_call>" in choice["message"]["content"]
        traj = proxy.trajectory("mm")
        assert traj["parse_failures"] == 1 and traj["calls"][0]["parse_failure"] is True
        assert traj["segments"][0]["flags"]["parse_failures"] == 1
    run(body())


def test_matching_parser_parses_hermes_calls(tiny_hermes_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_hermes_model_dir, [HERMES_CALL], parser="hermes") as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("h")) as client:
                resp = (await client.post("/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS})).json()
        assert resp["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
        assert proxy.trajectory("h")["parse_failures"] == 0
    run(body())


def test_vllms_own_text_is_used_once_trusted_but_not_for_stop_string_cuts(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, ["ok"], text=lambda ids: "vLLM's text<|im_end|>") as (proxy, [fake]):
            proxy.core.renderer.text_checks_left = 0  # as after the first completions matched
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("t")) as client:
                plain = (await client.post("/chat/completions", json={
                    "model": "tiny", "messages": [{"role": "user", "content": "hi"}]})).json()
                cut = (await client.post("/chat/completions", json={
                    "model": "tiny", "messages": [{"role": "user", "content": "again"}], "stop": ["###"]})).json()
        # The end-of-turn text vLLM may keep is not content; a stop-string cut is decoded here.
        assert plain["choices"][0]["message"]["content"] == "vLLM's text"
        assert cut["choices"][0]["message"]["content"] == "ok"
        sent = fake.requests[0]
        assert sent["skip_special_tokens"] is False and sent["spaces_between_special_tokens"] is False
    run(body())


def test_context_overflow_is_an_api_error_and_a_session_reason(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, max_model_len=64) as (proxy, [fake]):
            long = [{"role": "user", "content": "word " * 200}]
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                oa = await client.post("/s/ctx/v1/chat/completions", json={"model": "m", "messages": long})
                an = await client.post("/s/ctx2/v1/messages", json={"model": "m", "max_tokens": 5,
                                                                     "messages": long})
        assert oa.status_code == 400 and oa.json()["error"]["code"] == "context_length_exceeded"
        assert an.status_code == 400 and an.json()["error"]["type"] == "invalid_request_error"
        assert "prompt is too long" in an.json()["error"]["message"]
        assert fake.requests == []  # never sent upstream
        assert proxy.trajectory("ctx")["reasons"] == ["context_exceeded"]
        assert proxy.trajectory("ctx2")["reasons"] == ["context_exceeded"]
    run(body())


def test_max_tokens_is_capped_to_the_room_left(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, max_model_len=100) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("cap")) as client:
                await client.post("/chat/completions", json={
                    "model": "m", "max_tokens": 5000, "messages": [{"role": "user", "content": "hi"}]})
        sent = fake.requests[0]
        assert sent["max_tokens"] == 100 - len(sent["prompt"])
    run(body())


def test_session_budgets_end_the_episode_with_a_reason(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, replies=["one two three four five six"]) as (proxy, [fake]):
            proxy.core.config.max_calls_per_session = 2
            history = [{"role": "user", "content": "hi"}]
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                answers = []
                for _ in range(3):  # the third call is over the session's 2 calls
                    r = await client.post("/s/calls/v1/chat/completions", json={"model": "m", "messages": history})
                    answers.append(r)
                    if r.status_code == 200:
                        history += [r.json()["choices"][0]["message"], {"role": "user", "content": "again"}]
                assert [a.status_code for a in answers] == [200, 200, 400]
                assert answers[2].json()["error"]["code"] == "session_budget_exceeded"
                assert len(fake.requests) == 2

                # A response-token budget set per session caps max_tokens, then refuses.
                set_resp = await client.post("/s/tok/limits", json={"max_response_tokens": 12, "max_calls": 10})
                assert set_resp.json()["limits"] == {"max_response_tokens": 12, "max_calls": 10}
                first = await client.post("/s/tok/v1/messages", json={
                    "model": "m", "max_tokens": 500, "messages": [{"role": "user", "content": "hi"}]})
                assert first.status_code == 200 and fake.requests[-1]["max_tokens"] == 12
                used = proxy.trajectory("tok")["response_tokens"]
                assert used == first.json()["usage"]["output_tokens"]
                again = await client.post("/s/tok/v1/messages", json={
                    "model": "m", "max_tokens": 500, "messages": [
                        {"role": "user", "content": "hi"}, {"role": "assistant", "content": first.json()["content"]},
                        {"role": "user", "content": "a long tool output " * 5}]})
                assert again.status_code == 400 and again.json()["error"]["type"] == "invalid_request_error"
        assert proxy.trajectory("calls")["reasons"] == ["call_limit"]
        assert proxy.trajectory("tok")["reasons"] == ["response_budget"]
        assert proxy.core.stats["budget_exhausted"] == 2
    run(body())


def test_session_sampling_overrides_win_and_extras_pass_through(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                set_resp = await client.post("/s/o/sampling", json={"temperature": 1.0,
                                                                   "structured_outputs": {"regex": "ok"}})
                assert set_resp.json()["sampling_overrides"]["temperature"] == 1.0
                await client.post("/s/o/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2,
                    "top_k": 5, "unknown_field": 1})
        sent = fake.requests[0]
        assert sent["temperature"] == 1.0 and sent["structured_outputs"] == {"regex": "ok"}
        assert sent["top_k"] == 5 and "unknown_field" not in sent
        assert sent["return_token_ids"] is True and sent["logprobs"] == 0
    run(body())


def test_a_seeded_session_seeds_each_call_apart(tiny_model_dir: Path) -> None:
    """A seed set on the session (a seeded validation attempt) reaches vLLM as seed + call index:
    the same attempt draws alike at every step, and its calls do not repeat one another's draws."""
    async def body() -> None:
        async with proxy_on(tiny_model_dir, ["one", "two"]) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                await client.post("/s/seeded/sampling", json={"seed": 100})
                history = [{"role": "user", "content": "hi"}]
                for _ in range(2):
                    r = await client.post("/s/seeded/v1/chat/completions", json={"model": "m", "messages": history})
                    history += [r.json()["choices"][0]["message"], {"role": "user", "content": "again"}]
                await client.post("/s/plain/v1/chat/completions", json={
                    "model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert [r.get("seed") for r in fake.requests] == [100, 101, None]
    run(body())


def test_rewritten_history_opens_a_new_segment(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, ["one", "two"]) as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("b")) as client:
                msgs = [{"role": "user", "content": "first"}]
                r = (await client.post("/chat/completions", json={"model": "m", "messages": msgs})).json()
                msgs = [{"role": "user", "content": "first (compacted)"}, r["choices"][0]["message"],
                        {"role": "user", "content": "again"}]
                await client.post("/chat/completions", json={"model": "m", "messages": msgs})
        traj = proxy.trajectory("b")
        assert traj["num_segments"] == 2 and traj["num_breaks"] == 1
    run(body())


def test_sessions_stick_to_a_replica_and_new_ones_spread(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, upstreams=2) as (proxy, fakes):
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                for _ in range(3):
                    for sid in ("a", "b", "c", "d"):
                        await client.post(f"/s/{sid}/v1/chat/completions", json={
                            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
            used = {sid: {c["upstream"] for c in proxy.trajectory(sid)["calls"]} for sid in "abcd"}
            assert all(len(u) == 1 for u in used.values())  # sticky
            assert len(fakes[0].requests) == len(fakes[1].requests) == 6  # balanced
            proxy.close_session("a")
            assert "a" not in proxy.core.router.assignment
    run(body())


def test_api_keys_become_sessions_and_are_never_logged(tiny_model_dir: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-ant-SECRET-0123456789abcdef"
    caplog.set_level(logging.DEBUG)

    async def body() -> dict[str, Any]:
        async with proxy_on(tiny_model_dir) as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                  json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                await client.post("/v1/messages", headers={"x-api-key": secret},
                                  json={"model": "m", "max_tokens": 4,
                                        "messages": [{"role": "user", "content": "hi"}]})
                listed = (await client.get("/sessions")).text
            return {"traj": proxy.trajectory(session_for_api_key(secret)), "listed": listed}

    out = run(body())
    assert out["traj"]["num_calls"] == 2
    everything = orjson.dumps(out).decode() + caplog.text
    assert secret not in everything and secret[-12:] not in everything
    assert session_for_api_key(secret) in out["listed"]


def test_models_stats_and_health_endpoints(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(lambda prompt, body: [5, 2])
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(fake.running())
            config = ProxyConfig(model_path=str(tiny_model_dir), upstreams=[fake.base_url], port=0,
                                 served_model_name="tiny")
            proxy = await stack.enter_async_context(ProxyServer(config))
            client = await stack.enter_async_context(httpx.AsyncClient(base_url=proxy.url))
            models = (await client.get("/s/x/v1/models")).json()
            plain = (await client.get("/v1/models")).json()
            await client.post("/s/x/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            stats = (await client.get("/stats")).json()
            health = await client.get("/health")
            missing = await client.get("/s/nope/trajectory")
            await fake.stop()
            gone = await client.get("/health")
        assert models["data"][0]["id"] == "tiny" and plain == models
        assert stats["calls"] == 1 and stats["completion_tokens"] == 2 and stats["sessions"] == 1
        assert health.status_code == 200 and health.json()["upstreams"] == {fake.base_url: True}
        assert missing.status_code == 404
        # vLLM gone: the proxy must not look healthy (a stale proxy on 8002 would fool a launcher).
        assert gone.status_code == 503 and gone.json()["upstreams"] == {fake.base_url: False}
    run(body())



def test_window_is_clamped_to_what_vllm_serves(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, max_model_len=8192, served_len=2048) as (proxy, _):
            assert proxy.core.max_model_len == 2048 and proxy.core.config.max_model_len == 8192
    run(body())


def test_parser_template_mismatch_is_detected_at_start(tiny_hermes_model_dir: Path) -> None:
    from rlkit.errors import UserError

    async def body() -> None:
        async with proxy_on(tiny_hermes_model_dir, parser="qwen3_coder") as (proxy, _):
            check = proxy.core.parser_check
            assert check is not None and check["ok"] is False
            assert '"name": "run_shell"' in check["rendered_call"]
        config = ProxyConfig(model_path=str(tiny_hermes_model_dir), upstreams=["http://127.0.0.1:9"], port=0,
                             tool_call_parser="qwen3_coder", strict_parser_check=True)
        with pytest.raises(UserError) as err:
            async with ProxyServer(config):
                pass
        assert err.value.key == "TOOL_CALL_PARSER"
        async with proxy_on(tiny_hermes_model_dir, parser="hermes") as (proxy, _):
            assert proxy.core.parser_check is not None and proxy.core.parser_check["ok"] is True
    run(body())


def test_check_parser_command(tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlkit.cli.main import main

    assert main(["proxy", "check-parser", "--model-path", str(tiny_model_dir), "--tool-call-parser",
                 "qwen3_coder"]) == 0
    assert main(["proxy", "check-parser", "--model-path", str(tiny_model_dir), "--tool-call-parser",
                 "hermes"]) == 1
    out = capsys.readouterr().out
    assert "✓ parser 'qwen3_coder'" in out and "✗ parser 'hermes'" in out


def test_background_proxy_serves_synchronous_callers(tiny_model_dir: Path) -> None:
    from rlkit.proxy import BackgroundProxy

    async def upstream_and_calls(stop: asyncio.Event, ready: Any) -> None:
        fake = FakeVllm(lambda prompt, body: [5, 6, 2])
        async with fake.running():
            ready.set_result(fake.base_url)
            await stop.wait()

    import threading
    from concurrent.futures import Future

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready: Future = Future()
    thread = threading.Thread(target=lambda: loop.run_until_complete(upstream_and_calls(stop, ready)))
    thread.start()
    try:
        config = ProxyConfig(model_path=str(tiny_model_dir), upstreams=[ready.result(30)], port=0)
        with BackgroundProxy(config) as proxy:
            proxy.set_session_sampling("sync", {"temperature": 0})
            resp = httpx.post(proxy.openai_base_url("sync") + "/chat/completions", trust_env=False, timeout=30,
                              json={"messages": [{"role": "user", "content": "hi"}]})
            assert resp.status_code == 200
            record = proxy.close_session("sync")
        assert record is not None and record["calls"][0]["completion_ids"] == [5, 6, 2]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def test_a_retried_request_gets_the_same_prompt_ids(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, ["one", "two", "three"]) as (proxy, [fake]):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("r")) as client:
                msgs = [{"role": "user", "content": "first"}]
                r = (await client.post("/chat/completions", json={"messages": msgs})).json()
                msgs += [r["choices"][0]["message"], {"role": "user", "content": "second"}]
                await client.post("/chat/completions", json={"messages": msgs})
                await client.post("/chat/completions", json={"messages": msgs})  # client-side retry
        p1, p2 = fake.requests[1]["prompt"], fake.requests[2]["prompt"]
        assert p1 == p2  # sampled ids of turn 1 kept, not re-tokenized from text
        traj = proxy.trajectory("r")
        assert traj["calls"][2]["parent"] == 0 and traj["calls"][2]["prompt_ids"] == p1
        assert traj["num_segments"] == 2 and traj["num_breaks"] == 1  # the retry is a branch
    run(body())


def test_streams_open_early_and_keep_alive_while_generating(tiny_model_dir: Path) -> None:
    async def body() -> tuple[str, str]:
        async with proxy_on(tiny_model_dir, ["slow answer"], delay_s=0.5, keepalive_s=0.05) as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
                an = await client.post("/s/k/v1/messages", json={
                    "model": "m", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
                oa = await client.post("/s/k2/v1/chat/completions", json={
                    "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        return an.text, oa.text

    an, oa = run(body())
    events = re.findall(r"^event: (\S+)$", an, flags=re.MULTILINE)
    assert events[0] == "message_start" and "ping" in events
    assert events[events.index("ping"):][-5:] == ["content_block_start", "content_block_delta", "content_block_stop",
                                                  "message_delta", "message_stop"]
    assert sse_data(an)[0]["message"]["usage"]["input_tokens"] > 0
    assert ": keepalive" in oa
    chunks = sse_data(oa)
    assert len({c["id"] for c in chunks}) == 1  # one stream id across the early head and the body
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "slow answer"


def test_an_upstream_failure_after_the_stream_opened_is_an_error_event(tiny_model_dir: Path) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with proxy_on(tiny_model_dir, status=500) as (proxy, _):
            async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
                msgs = [{"role": "user", "content": "hi"}]
                an = await client.post("/s/e/v1/messages", json={"model": "m", "max_tokens": 8, "stream": True,
                                                                  "messages": msgs})
                oa = await client.post("/s/e2/v1/chat/completions", json={"model": "m", "stream": True,
                                                                          "messages": msgs})
                plain = await client.post("/s/e3/v1/chat/completions", json={"model": "m", "messages": msgs})
        return an, oa, plain

    an, oa, plain = run(body())
    assert "event: error" in an.text and '"api_error"' in an.text
    assert '"upstream_error"' in oa.text and oa.text.rstrip().endswith("data: [DONE]")
    assert plain.status_code == 502 and "engine died" in plain.json()["error"]["message"]


def test_a_busy_port_is_a_user_error(tiny_model_dir: Path) -> None:
    import socket

    from rlkit.errors import UserError

    async def body() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            config = ProxyConfig(model_path=str(tiny_model_dir), upstreams=["http://127.0.0.1:9"], port=port)
            with pytest.raises(UserError, match="already in use") as err:
                async with ProxyServer(config):
                    pass
            assert "cleanup_before_run" in err.value.fix
    run(body())


def test_sessions_move_off_a_replica_that_went_away(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir, ["one", "two"], upstreams=2) as (proxy, fakes):
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("m")) as client:
                msgs = [{"role": "user", "content": "hi"}]
                r = (await client.post("/chat/completions", json={"messages": msgs})).json()
                first = proxy.trajectory("m")["calls"][0]["upstream"]
                dead = next(f for f in fakes if f.base_url == first)
                await dead.stop()
                msgs += [r["choices"][0]["message"], {"role": "user", "content": "again"}]
                second = await client.post("/chat/completions", json={"messages": msgs})
                other = await client.post(proxy.openai_base_url("new") + "/chat/completions",
                                          json={"messages": [{"role": "user", "content": "x"}]})
            assert second.status_code == 200 and other.status_code == 200
            traj = proxy.trajectory("m")
            assert traj["calls"][1]["upstream"] != first
            assert traj["num_segments"] == 1  # the token record continues on the new replica
            assert proxy.trajectory("new")["calls"][0]["upstream"] != first  # benched for new sessions too
    run(body())


def test_no_reachable_replica_is_a_502(tiny_model_dir: Path) -> None:
    async def body() -> None:
        async with proxy_on(tiny_model_dir) as (proxy, [fake]):
            await fake.stop()
            async with httpx.AsyncClient(base_url=proxy.openai_base_url("d")) as client:
                resp = await client.post("/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert resp.status_code == 502 and "unreachable" in resp.json()["error"]["message"]
    run(body())
