"""New policy weights into a running vLLM server, and the check that they arrived.

In place (the server runs with VLLM_SERVER_DEV_MODE=1):
    POST /pause?mode=keep            freeze in-flight requests instead of aborting them
    POST /collective_rpc             {"method": "reload_weights", "kwargs": {"weights_path": DIR}}
    POST /reset_prefix_cache?reset_running_requests=true
                                     KV blocks computed with the old weights would otherwise be
                                     reused (logprobs off by up to 0.35); frozen requests are
                                     preempted and recomputed with the new weights
    POST /resume
`Inference.sync_weights` falls back to a restart on the new weights when this fails.
A model with tied embeddings reloads through rlkit's worker extension instead, which also
repacks the CPU output layer (`vllm_ext/rlkit_vllm_ext.py`).

The check: the server's logprobs of a fixed probe sequence against the trainer's own
logprobs of the same tokens (`LogprobProbe`); the difference is logged as a metric.
vLLM's prompt logprobs never read the prefix cache, so the probe checks the weights only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from rlkit.errors import LaunchError
from rlkit.launch._http import HttpStatusError, get_json, post_json


@dataclass(frozen=True)
class LogprobProbe:
    """A fixed token sequence and the trainer's logprobs of `target_ids` given `prompt_ids`."""

    prompt_ids: list[int]
    target_ids: list[int]
    trainer_logprobs: list[float]

    def __post_init__(self) -> None:
        if not self.prompt_ids or not self.target_ids:
            raise ValueError("a probe needs at least one prompt and one target token")
        if len(self.trainer_logprobs) != len(self.target_ids):
            raise ValueError(f"{len(self.trainer_logprobs)} trainer logprobs for {len(self.target_ids)} targets")


class WeightSyncReport(BaseModel):
    """What one sync did and how long each part took (seconds)."""

    method: Literal["reload", "restart"]
    weights_path: str
    seconds: float
    paused: bool = False  # in-flight requests were frozen (pause?mode=keep) during the reload
    reload_s: float | None = None
    reset_prefix_cache_s: float | None = None
    restart_s: float | None = None
    reload_error: str | None = None  # why the in-place reload was not used (method == "restart")
    probe_s: float | None = None
    max_abs_diff: float | None = None  # |server - trainer| over the probe's target tokens
    mean_abs_diff: float | None = None

    def metrics(self) -> dict[str, float]:
        """Flat metrics for the step's log line."""
        out = {"weight_sync/seconds": self.seconds, "weight_sync/restarted": float(self.method == "restart")}
        if self.max_abs_diff is not None and self.mean_abs_diff is not None:
            out["weight_sync/logprob_diff_max"] = self.max_abs_diff
            out["weight_sync/logprob_diff_mean"] = self.mean_abs_diff
        return out


@dataclass
class ReloadTimings:
    paused: bool
    reload_s: float
    reset_prefix_cache_s: float


# A tied lm_head on the CPU needs the worker extension's repacking reload (see vllm_ext/).
EXTENSION_DIR = Path(__file__).resolve().parent / "vllm_ext"
WORKER_EXTENSION = "rlkit_vllm_ext.RlkitWorkerExtension"
RELOAD = "reload_weights"
RELOAD_REPACKED = "reload_weights_repacked"


def ties_embeddings(model_path: str | Path) -> bool:
    """Does the HF model share its input embedding with the output layer?"""
    from rlkit.config.model_files import FileReadError, read_model_config

    try:
        return read_model_config(model_path).ties_embeddings
    except FileReadError:
        return False


def reload_in_place(vllm_url: str, weights_path: str, *, method: str = RELOAD,
                    timeout_s: float = 600.0) -> ReloadTimings:
    """Reload weights from an HF directory into a dev-mode server; raises LaunchError when it fails.

    Always passes `weights_path`: once a reload used one, later plain reloads read from it.
    `method` is RELOAD_REPACKED for a server started with the worker extension.
    """
    paused = _pause(vllm_url)
    try:
        start = time.perf_counter()
        try:
            post_json(f"{vllm_url}/collective_rpc", {"method": method, "timeout": timeout_s,
                                                     "kwargs": {"weights_path": weights_path}},
                      timeout_s=timeout_s + 30)
        except (HttpStatusError, OSError) as exc:
            hint = " (is the server in dev mode, VLLM_SERVER_DEV_MODE=1?)" if _status(exc) == 404 else ""
            raise LaunchError(f"vLLM could not reload weights from {weights_path}: {exc}{hint}",
                              weights_path=weights_path) from exc
        reload_s = time.perf_counter() - start
        start = time.perf_counter()
        reset_prefix_cache(vllm_url)  # before resuming: frozen requests must not reuse old-weight blocks
        return ReloadTimings(paused=paused, reload_s=reload_s, reset_prefix_cache_s=time.perf_counter() - start)
    finally:
        if paused:
            _resume(vllm_url)


def _status(exc: Exception) -> int | None:
    return exc.status if isinstance(exc, HttpStatusError) else None


def _pause(vllm_url: str) -> bool:
    """Freeze in-flight requests; False where the server has no /pause (they then run on during the reload)."""
    try:
        post_json(f"{vllm_url}/pause?mode=keep")
    except (HttpStatusError, OSError):
        return False
    return True


def _resume(vllm_url: str) -> None:
    try:
        post_json(f"{vllm_url}/resume")
    except (HttpStatusError, OSError) as exc:  # a server left paused serves nothing: restart it
        raise LaunchError(f"vLLM did not resume generation after the reload: {exc}") from exc


def reset_prefix_cache(vllm_url: str, *, attempts: int = 20) -> None:
    """Drop every cached KV block; requests holding blocks are preempted and recomputed."""
    for _ in range(attempts):
        try:
            answer = post_json(f"{vllm_url}/reset_prefix_cache?reset_running_requests=true")
        except (HttpStatusError, OSError) as exc:
            raise LaunchError(f"vLLM could not reset its prefix cache: {exc}") from exc
        if not isinstance(answer, dict) or answer.get("success", True):
            return
        time.sleep(0.05)  # blocks still held (an async transfer); vLLM says to retry
    raise LaunchError(f"vLLM refused to reset its prefix cache {attempts} times; stale KV blocks would be reused")


def is_paused(vllm_url: str) -> bool | None:
    try:
        return bool(get_json(f"{vllm_url}/is_paused")["is_paused"])
    except (HttpStatusError, OSError, KeyError, TypeError):
        return None


def server_logprobs(vllm_url: str, model: str, prompt_ids: Sequence[int], target_ids: Sequence[int], *,
                    timeout_s: float = 120.0) -> list[float]:
    """The server's logprobs of `target_ids` following `prompt_ids` (one forward, prompt logprobs)."""
    ids = [int(t) for t in (*prompt_ids, *target_ids)]
    answer = post_json(f"{vllm_url}/v1/completions",
                       {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
                       timeout_s=timeout_s)
    per_token: list[dict[str, Any] | None] = answer["choices"][0]["prompt_logprobs"]
    out = []
    for position in range(len(prompt_ids), len(ids)):
        entry = per_token[position] or {}
        token = entry.get(str(ids[position]))
        if token is None:
            raise LaunchError(f"vLLM gave no prompt logprob for token {ids[position]} at position {position}")
        out.append(float(token["logprob"]))
    return out


def logprob_diff(server: Sequence[float], trainer: Sequence[float]) -> tuple[float, float]:
    """(max, mean) absolute difference of two aligned logprob lists."""
    if len(server) != len(trainer) or not server:
        raise ValueError(f"cannot compare {len(server)} server logprobs with {len(trainer)} trainer logprobs")
    diffs = [abs(a - b) for a, b in zip(server, trainer, strict=True)]
    return max(diffs), sum(diffs) / len(diffs)


def hf_logprobs(model: Any, prompt_ids: Sequence[int], target_ids: Sequence[int]) -> list[float]:
    """A transformers causal LM's logprobs of `target_ids` after `prompt_ids` (one forward, no grad)."""
    import torch

    ids = torch.tensor([[*prompt_ids, *target_ids]], dtype=torch.long, device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt_ids):, None])
    return picked.squeeze(-1).tolist()
