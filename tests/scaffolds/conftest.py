"""Fixtures of the scaffold tests: the proxy in front of the session's vLLM, the agents' images.

The agents' system prompts are long (Claude Code's is ~17k tokens with the tiny
tokenizer): the shared `vllm_server` has a 40k window for them. The proxy runs in a
thread with its own event loop so each test can drive agents with `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
TASK_DIR = REPO / "examples" / "tasks" / "calc-power-unary"
SCAFFOLD_MAX_MODEL_LEN = 40960
# Long enough for a terminus JSON answer, short enough to keep CPU decoding quick.
MAX_RESPONSE_TOKENS = 192


@dataclass
class ProxyStack:
    """A running proxy (in a thread) in front of a running vLLM."""

    url: str
    model: str

    def set_sampling(self, session: str, overrides: dict) -> None:
        response = httpx.post(f"{self.url}/s/{session}/sampling", json=overrides, timeout=30, trust_env=False)
        response.raise_for_status()

    def record(self, session: str) -> dict:
        response = httpx.get(f"{self.url}/s/{session}/trajectory", timeout=30, trust_env=False)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="session")
def scaffold_stack(tiny_model_dir: Path, vllm_server) -> Iterator[ProxyStack]:
    """The proxy, in a thread with its own event loop, in front of the session's vLLM (its 40k window
    holds the agents' long system prompts)."""
    from rlkit.proxy.core import ProxyConfig
    from rlkit.proxy.server import ProxyServer

    assert vllm_server.config.max_model_len >= SCAFFOLD_MAX_MODEL_LEN
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rlkit-proxy", daemon=True)
    thread.start()
    proxy = ProxyServer(ProxyConfig(model_path=str(tiny_model_dir), upstreams=[vllm_server.base_url],
                                    served_model_name="tiny", host="127.0.0.1", port=0,
                                    max_model_len=SCAFFOLD_MAX_MODEL_LEN, max_response_tokens=MAX_RESPONSE_TOKENS))
    asyncio.run_coroutine_threadsafe(proxy.start(), loop).result(timeout=180)
    try:
        yield ProxyStack(url=proxy.url, model="tiny")
    finally:
        asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


@pytest.fixture(scope="session")
def task_image(base_image: str) -> str:
    """The bundled task's plain image (rlkit-task/<id>:latest), built once."""
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import read_task_spec

    [outcome] = build_task_images([read_task_spec(TASK_DIR)])
    assert outcome.status != "failed", outcome.detail
    return outcome.image


@pytest.fixture(scope="session")
def agent_images(task_image: str) -> dict[str, str]:
    """Each in-container agent's image (cached by docker): sandboxes mount it from its volume."""
    from rlkit.scaffolds.bake import build_agent_image

    return {name: build_agent_image(name, log=lambda _m: None) for name in ("cc", "oc", "ohsdk")}


@pytest.fixture(scope="session")
def baked_images(task_image: str, agent_images: dict[str, str]) -> dict[str, str]:
    """The task image with each in-container agent baked in (AGENT_DELIVERY=bake)."""
    from rlkit.scaffolds.bake import build_scaffold_image

    return {name: build_scaffold_image(task_image, name, log=lambda _m: None) for name in ("cc", "oc", "ohsdk")}
