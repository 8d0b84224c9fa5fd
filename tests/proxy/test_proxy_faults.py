"""The proxy under faulty backends and clients (scripted upstream): stalls, disconnects,
looping clients, overflow shapes, failed-request sessions, preconnects and health."""
# ruff: noqa: SIM117 - the client is built from the proxy that the outer block starts

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from rlkit.proxy import ProxyConfig, ProxyServer
from rlkit.proxy.core import DEFAULT_MAX_CALLS
from tests.proxy._fake_vllm import FakeVllm

HI = {"messages": [{"role": "user", "content": "hi"}]}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def proxied(model_dir: Path, fake: FakeVllm, **config: Any):
    """(proxy, client) in front of `fake`."""
    async with fake.running():
        cfg = ProxyConfig(model_path=str(model_dir), upstreams=[fake.base_url], port=0, served_model_name="tiny",
                          **config)
        async with ProxyServer(cfg) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as client:
                yield proxy, client


def _ids(model_dir: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return lambda prompt, body: tok.encode("fine", add_special_tokens=False) + [tok.eos_token_id]


def test_no_first_token_ends_the_call_with_a_clean_error(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), delay_s=3.0)
        async with proxied(tiny_model_dir, fake, first_token_timeout_s=0.3) as (proxy, client):
            plain = await client.post("/s/a/v1/chat/completions", json=HI)
            streamed = await client.post("/s/b/v1/messages", json={**HI, "max_tokens": 64, "stream": True})
            assert plain.status_code == 502
            error = plain.json()["error"]
            assert error["type"] == "upstream_error" and "first-token timeout" in error["message"]
            assert streamed.status_code == 200  # the stream was open: the error is its last event
            events = [orjson.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
            assert events[-1]["type"] == "error" and "first-token timeout" in events[-1]["error"]["message"]
            for sid in ("a", "b"):
                record = (await client.get(f"/s/{sid}/trajectory")).json()
                assert record["num_calls"] == 0 and record["reasons"] == ["upstream_timeout"]
            assert proxy.core.stats["upstream_stalls"] == 2
    run(body())


def test_a_stall_between_tokens_ends_the_call_and_aborts_the_stream(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), stream=True, stall_after=1, stall_s=3.0)
        async with proxied(tiny_model_dir, fake, token_timeout_s=0.3) as (_proxy, client):
            answer = await client.post("/s/a/v1/chat/completions", json=HI)
            assert answer.status_code == 502 and "token timeout" in answer.json()["error"]["message"]
            for _ in range(50):  # the fake notices the closed connection when it writes again
                if fake.aborted:
                    break
                await asyncio.sleep(0.1)
            assert fake.aborted == 1
            fake.stall_after = None
            ok = await client.post("/s/a/v1/chat/completions", json=HI)  # the streamed path, whole
            assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "fine"
            assert (await client.get("/s/a/trajectory")).json()["num_calls"] == 1
    run(body())


def test_a_client_that_disconnects_leaves_no_call_and_aborts_generation(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), stream=True, stall_after=1, stall_s=1.5)
        async with proxied(tiny_model_dir, fake) as (proxy, client):
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/s/gone/v1/chat/completions", json=HI, timeout=0.4)
            for _ in range(50):
                if fake.aborted:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # past the fake's stall: a late answer would have been recorded now
            assert fake.aborted == 1
            assert proxy.core.stats["calls"] == 0
            # the session existed only for that request: nothing lingers
            assert (await client.get("/sessions")).json()["sessions"] == []
    run(body())


def test_an_overflowing_compacting_client_is_stopped_by_the_default_budget(tiny_model_dir: Path) -> None:
    """opencode with a window smaller than its prompt: overflow, compact, overflow, ... forever."""
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir))
        async with proxied(tiny_model_dir, fake, max_model_len=256) as (proxy, client):
            assert proxy.core.config.max_calls_per_session == DEFAULT_MAX_CALLS
            long_prompt = {"messages": [{"role": "user", "content": "word " * 400}]}
            compact = {"messages": [{"role": "user", "content": "summarize the conversation"}]}
            requests, last = 0, None
            while requests < 3 * DEFAULT_MAX_CALLS:
                answer = await client.post("/s/loop/v1/chat/completions", json=long_prompt)
                requests += 1
                last = answer.json()["error"]
                if last["code"] != "context_length_exceeded":
                    break
                answer = await client.post("/s/loop/v1/chat/completions", json=compact)
                requests += 1
                if answer.status_code != 200:
                    last = answer.json()["error"]
                    break
            assert last is not None and last["code"] == "session_budget_exceeded"
            assert requests <= DEFAULT_MAX_CALLS + 1
            record = (await client.get("/s/loop/trajectory")).json()
            assert record["reasons"] == ["context_exceeded", "call_limit"]
    run(body())


def test_overflow_is_answered_in_each_apis_own_shape_and_the_window_is_read_again(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), max_model_len=8192)
        async with proxied(tiny_model_dir, fake) as (proxy, client):
            assert proxy.core.max_model_len == 8192
            # vLLM restarted with a smaller window behind the proxy's back: its 400 is vLLM's JSON
            fake.max_model_len, fake.status = 4, 400
            fake.error_text = orjson.dumps({"error": {"message": "This model's maximum context length is 4 tokens. "
                                                      "However, you requested 40 tokens.", "type": "BadRequestError",
                                                      "code": 400}}).decode()
            openai = await client.post("/s/o/v1/chat/completions", json=HI)
            anthropic = await client.post("/s/a/v1/messages", json={**HI, "max_tokens": 8})
            assert proxy.core.max_model_len == 4  # re-read after vLLM refused
            error = openai.json()["error"]
            assert openai.status_code == 400 and error["code"] == "context_length_exceeded"
            assert error["message"].startswith("This model's maximum context length is")
            assert '\\"' not in error["message"] and "{" not in error["message"]  # not double-encoded
            assert anthropic.status_code == 400
            body = anthropic.json()
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
            assert body["error"]["message"].startswith("prompt is too long: ")
            assert len(fake.requests) == 1  # the proxy refused the second itself, knowing the new window
    run(body())


def test_failed_requests_leave_no_session_and_preconnects_answer(tiny_model_dir: Path) -> None:
    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), status=500)
        async with proxied(tiny_model_dir, fake) as (_proxy, client):
            failed = await client.post("/s/broken/v1/chat/completions", json=HI)
            assert failed.status_code == 502
            head = await client.head("/s/cc-session")
            base = await client.get("/s/cc-session")
            assert head.status_code == 200 and base.status_code == 200
            assert (await client.head("/")).status_code == 200
            # a session the engine opened (limits) stays, even with no call
            await client.post("/s/engine/limits", json={"max_calls": 3})
            await client.post("/s/engine/v1/chat/completions", json=HI)
            assert (await client.get("/sessions")).json()["sessions"] == ["engine"]
    run(body())


def test_health_reports_each_backend_and_the_probe_follows_it(tiny_model_dir: Path) -> None:
    import os

    from rlkit.proxy.health import ProxyUnhealthy, probe_proxy

    async def body() -> None:
        fake = FakeVllm(_ids(tiny_model_dir), max_model_len=4096)
        async with proxied(tiny_model_dir, fake) as (proxy, client):
            health = await client.get("/health")
            assert health.status_code == 200
            doc = health.json()
            assert doc["model"] == "tiny" and doc["pid"] == os.getpid() and doc["max_model_len"] == 4096
            assert doc["backends"] == [{"url": fake.base_url, "up": True, "models": ["tiny"], "serves_model": True,
                                        "max_model_len": 4096, "error": None}]
            assert (await asyncio.to_thread(probe_proxy, proxy.url, "tiny", pid=os.getpid()))["status"] == "ok"
            with pytest.raises(ProxyUnhealthy, match="stale proxy"):
                await asyncio.to_thread(probe_proxy, proxy.url, "another-model")
            with pytest.raises(ProxyUnhealthy, match="another process"):
                await asyncio.to_thread(probe_proxy, proxy.url, "tiny", pid=1)
            fake.model = "other"  # a backend restarted on another model
            wrong = await client.get("/health")
            assert wrong.status_code == 503 and wrong.json()["reason"] == "no backend serves tiny"
            await fake.stop()
            gone = await client.get("/health")
            assert gone.status_code == 503 and gone.json()["reason"] == "no backend answers"
            assert gone.json()["backends"][0]["up"] is False
            with pytest.raises(ProxyUnhealthy, match="no backend answers"):
                await asyncio.to_thread(probe_proxy, proxy.url, "tiny")
        with pytest.raises(ProxyUnhealthy, match="does not answer|no answer"):
            await asyncio.to_thread(probe_proxy, proxy.url, "tiny")
    run(body())
