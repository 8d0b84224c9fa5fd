"""The embedded trainer's policy update: an HF causal LM, verl's losses, AdamW; CPU or CUDA.

One `update` = for each mini-batch: forward + backward over its micro-batches (gradients
accumulate, each micro-batch's loss normalised by the mini-batch's totals as verl's actor
does), clip the gradient norm, one optimizer step. Under torch.distributed (torchrun) the
model is sharded with FSDP2 (`fully_shard` per decoder layer plus the root) and every rank
updates on its own rows; token and sequence totals are summed over ranks first.

Each speed technique is a flag of `UpdateFlags`, so bench/gpu_update.py can show what each
one buys; `UpdateFlags.plain()` is the plain HF + torch path.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlkit.train import _model
from rlkit.train.algo import AlgoConfig, actor_config, compute_advantages, global_batch_info, policy_loss
from rlkit.train.batch import TrainBatch


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float = 1.0
    fused: bool | None = None  # None: fused AdamW where the device supports it (CUDA)


@dataclass(frozen=True)
class UpdateFlags:
    packing: bool = True                  # rows end to end, no padding (else padded micro-batches)
    attention: str = "sdpa"               # sdpa (torch's choice) | cudnn | flash | efficient | eager
    chunked_logits: bool = True           # lm_head + log-softmax in chunks, loss tokens only (else full logits)
    logprob_chunk: int = 2048             # tokens per lm_head chunk (its fp32 logits: chunk x vocab x 4 bytes)
    activation_checkpointing: bool = False
    compile: bool = False                 # torch.compile each decoder layer and the lm_head chunk
    micro_batch_tokens: int = 16384       # packing: token budget of a micro-batch (a longer row goes alone)
    micro_batch_rows: int = 1             # padded: rows per micro-batch
    # FSDP2 only: True frees gathered layers after each forward (ZeRO-3); False keeps them for the
    # backward (one all-gather per layer per micro-batch), what a model that fits a GPU wants
    fsdp_reshard_after_forward: bool = False

    @classmethod
    def plain(cls) -> UpdateFlags:
        """The plain HF + torch path: padded rows, HF SDPA, full logits, one row per micro-batch."""
        return cls(packing=False, chunked_logits=False, micro_batch_rows=1)


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class PolicyUpdater:
    def __init__(self, model_dir: str | Path | None, algo: AlgoConfig, optim: OptimConfig = OptimConfig(), *,
                 device: str = "cpu", dtype: torch.dtype | None = None, flags: UpdateFlags = UpdateFlags(),
                 model: torch.nn.Module | None = None) -> None:
        """`model_dir`: an HF checkpoint; or pass a built `model` (then model_dir may be None)."""
        from transformers import AutoModelForCausalLM

        self.algo, self.optim_config, self.flags = algo, optim, flags
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.device = torch.device(device)
        self.world_size, self.rank = _distributed()
        attn = _model.PACKED_ATTENTION if flags.packing else ("eager" if flags.attention == "eager" else "sdpa")
        if flags.packing:
            _model.register_packed_attention()
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype or torch.float32)
        model.config._attn_implementation = attn
        model.config.use_cache = False
        self.dtype = next(model.parameters()).dtype
        model.to(self.device)
        self.ref: _model.PolicyCore | None = None
        if algo.use_kl_loss:  # the reference policy is the starting weights, frozen
            self.ref = _model.PolicyCore(copy.deepcopy(model)).eval().requires_grad_(False)
        if flags.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        self.core = _model.PolicyCore(model)
        if self.world_size > 1:
            self._shard()
        if flags.compile:
            for layer in model.model.layers:
                layer.compile(dynamic=True)
        fused = optim.fused if optim.fused is not None else self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(self.core.parameters(), lr=optim.lr, betas=optim.betas, eps=optim.eps,
                                           weight_decay=optim.weight_decay, fused=fused)
        self.global_step = 0

    @property
    def model(self) -> torch.nn.Module:
        """The HF causal LM (its parameters are DTensor shards under FSDP2)."""
        return self.core.lm

    def _shard(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # mesh named "fsdp": what verl's model merger expects of DTensor checkpoints
        self.mesh = init_device_mesh(self.device.type, (self.world_size,), mesh_dim_names=("fsdp",))
        reshard = self.flags.fsdp_reshard_after_forward
        for layer in self.core.lm.model.layers:
            fully_shard(layer, mesh=self.mesh, reshard_after_forward=reshard)
        fully_shard(self.core, mesh=self.mesh, reshard_after_forward=reshard)
        if self.ref is not None:
            for layer in self.ref.lm.model.layers:
                fully_shard(layer, mesh=self.mesh)
            fully_shard(self.ref, mesh=self.mesh)

    # ---- forward -------------------------------------------------------------------------------
    def _micro_batches(self, batch: TrainBatch) -> list[list[int]]:
        if not self.flags.packing:
            step = max(1, self.flags.micro_batch_rows)
            return [list(range(i, min(i + step, batch.rows))) for i in range(0, batch.rows, step)]
        lengths = (batch.prompt_lengths + batch.response_lengths).tolist()
        out: list[list[int]] = []
        used = 0
        for row, n in enumerate(lengths):
            if out and used + n <= self.flags.micro_batch_tokens:
                out[-1].append(row)
                used += n
            else:
                out.append([row])
                used = n
        return out

    def _token_stats(self, core: _model.PolicyCore, mb: TrainBatch, wanted: torch.Tensor, *,
                     entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_prob, entropy) [b, R] fp32 on the device; zero where `wanted` [b, R] is False."""
        flags, dev = self.flags, self.device
        labels = mb.responses[wanted].to(dev, non_blocking=True)
        if flags.packing:
            packed = mb.packed()
            bounds = tuple(packed.cu_seqlens.tolist())
            select = packed.logit_index[wanted].to(dev, non_blocking=True)
            kwargs = {"input_ids": packed.input_ids.to(dev), "position_ids": packed.position_ids.to(dev),
                          "packed_bounds": bounds}
        else:
            width, p = mb.input_ids.shape[1], mb.prompt_width
            rows, cols = wanted.nonzero(as_tuple=True)
            select = (rows * width + p - 1 + cols).to(dev, non_blocking=True)
            kwargs = {"input_ids": mb.input_ids.to(dev), "position_ids": mb.position_ids.to(dev),
                          "attention_mask": mb.attention_mask.to(dev)}
        with _model.sdpa_backend(flags.attention):
            logp, ent = core(select=select, labels=labels, full_logits=not flags.chunked_logits,
                             chunk=flags.logprob_chunk if flags.chunked_logits else None,
                             entropy_grad=entropy_grad, compiled=flags.compile, **kwargs)
        wanted_dev = wanted.to(dev)
        zeros = torch.zeros(wanted.shape, dtype=torch.float32, device=dev)
        # the entropy keeps its graph when the loss has an entropy bonus, or the bonus could not train
        return zeros.masked_scatter(wanted_dev, logp), zeros.masked_scatter(wanted_dev,
                                                                            ent if entropy_grad else ent.detach())

    @torch.no_grad()
    def _ref_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        assert self.ref is not None
        out = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
        for rows in self._micro_batches(batch):
            mb = batch.select(rows)
            lp, _ = self._token_stats(self.ref, mb, mb.response_mask > 0, entropy_grad=False)
            out[rows, : lp.shape[1]] = lp.cpu()
        return out

    @torch.no_grad()
    def log_probs(self, input_ids: Sequence[int] | torch.Tensor, *, start: int = 1) -> torch.Tensor:
        """log p(token_t | tokens_<t) for t >= start of one unpadded sequence: fp32 [len - start] (CPU)."""
        from rlkit.train.batch import batch_from_rows

        ids = torch.as_tensor(input_ids, dtype=torch.long).flatten().tolist()
        row = ("probe", 0.0, ids[:start], ids[start:], [1] * (len(ids) - start), [0.0] * (len(ids) - start))
        mb = batch_from_rows([row], pad_id=0)
        lp, _ = self._token_stats(self.core, mb, mb.attention_mask[:, mb.prompt_width:] > 0, entropy_grad=False)
        return lp[0].cpu()

    # ---- update --------------------------------------------------------------------------------
    def update(self, batch: TrainBatch, *, mini_batches: int = 1) -> dict[str, float]:
        """One PPO epoch over `batch` in `mini_batches` optimizer steps; verl metric names."""
        import torch.distributed as dist

        t0 = time.perf_counter()
        if batch.advantages is None:
            batch.advantages, batch.returns = compute_advantages(batch, self.algo)
        if self.algo.use_kl_loss and batch.ref_log_probs is None:
            batch.ref_log_probs = self._ref_log_probs(batch)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(name: str, value: float) -> None:
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1

        entropy_grad = self.algo.entropy_coeff != 0
        for rows in np.array_split(np.arange(batch.rows), max(1, min(mini_batches, batch.rows))):
            mb = batch.select(rows.tolist())
            totals = torch.tensor([float(mb.response_mask.sum()), float((mb.response_mask.sum(-1) > 0).sum())],
                                  device=self.device)
            if self.world_size > 1:
                dist.all_reduce(totals)
            info = global_batch_info(dp_size=self.world_size, batch_num_tokens=int(totals[0]),
                                     global_batch_size=int(totals[1]))
            config = actor_config(self.algo, info)
            step: dict[str, float] = {}
            ent_sum = torch.zeros((), device=self.device)
            micros = self._micro_batches(mb)
            for i, micro in enumerate(micros):
                if self.world_size > 1:  # gather weights and reduce-scatter gradients once per mini-batch
                    last = i == len(micros) - 1
                    self.core.set_requires_gradient_sync(last)
                    self.core.set_reshard_after_backward(last)
                mic = mb.select(micro)
                wanted = mic.response_mask > 0
                log_prob, entropy = self._token_stats(self.core, mic, wanted, entropy_grad=entropy_grad)
                dev = self.device
                loss, metrics = policy_loss(
                    old_log_prob=mic.old_log_probs.to(dev), log_prob=log_prob, advantages=mic.advantages.to(dev),
                    response_mask=mic.response_mask.to(dev), algo=self.algo,
                    entropy=entropy if entropy_grad else None,
                    ref_log_prob=None if mic.ref_log_probs is None else mic.ref_log_probs.to(dev), config=config)
                with _model.sdpa_backend(self.flags.attention):
                    loss.backward()
                ent_sum += entropy.detach().sum()
                for name, value in metrics.items():
                    step[name] = step.get(name, 0.0) + float(value)
                add("actor/pg_clipfrac", metrics["actor/pg_clipfrac"])
                add("actor/ppo_kl", metrics["actor/ppo_kl"])
                add("actor/pg_clipfrac_lower", metrics["actor/pg_clipfrac_lower"])
            # loss terms are normalised by the mini-batch totals, so their micro-batch sums are the mini-batch's
            for name in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss"):
                if name in step:
                    add(name, step[name] / self.world_size)
            add("actor/entropy", float(ent_sum) / max(1.0, float(mb.response_mask.sum())))
            grad_norm = self._clip_and_step()
            add("actor/grad_norm", grad_norm)
        out = {name: sums[name] / counts[name] for name in sums}
        if self.world_size > 1:
            keys = sorted(out)
            vec = torch.tensor([out[k] for k in keys], device=self.device)
            dist.all_reduce(vec)
            out = dict(zip(keys, (vec / self.world_size).tolist(), strict=True))
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        if self.algo.use_kl_loss:
            out["actor/kl_coef"] = self.algo.kl_loss_coef
        out["perf/update_tokens"] = float(batch.num_tokens())
        out["timing_s/update_actor"] = time.perf_counter() - t0
        return out

    def _clip_and_step(self) -> float:
        params = [p for p in self.core.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.optim_config.grad_clip)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        norm_value = float(norm)
        if np.isfinite(norm_value):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        return norm_value

    # ---- weights and state ---------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """HF-keyed full weights on the CPU (gathered from all ranks under FSDP2)."""
        out = {}
        for key, value in self.model.state_dict().items():
            if hasattr(value, "full_tensor"):
                value = value.full_tensor()
            out[key] = value.detach().cpu()
        return out

    def save_hf(self, out_dir: str | Path) -> Path:
        """config + safetensors + tokenizer + chat template: a directory vLLM loads (rank 0 writes)."""
        out = Path(out_dir)
        state = self.full_state_dict()
        if self.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(out, state_dict=state, safe_serialization=True)
            if self.model_dir is not None:
                _copy_tokenizer(self.model_dir, out)
        return out

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        """This rank's model shard, optimizer state and extra state (step, RNG)."""
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict(),
                "extra": {"global_step": self.global_step, "rng": rng_state()}}

    def load_checkpoint_state(self, model: dict[str, Any], optim: dict[str, Any], extra: dict[str, Any]) -> None:
        self.model.load_state_dict(model)
        self.optimizer.load_state_dict(optim)
        self.global_step = int(extra.get("global_step", 0))
        if "rng" in extra:
            set_rng_state(extra["rng"])


def _copy_tokenizer(src: Path, out: Path) -> None:
    import shutil

    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    for name in ("chat_template.jinja", "generation_config.json"):
        if (src / name).exists() and not (out / name).exists():
            shutil.copy2(src / name, out / name)


def rng_state() -> dict[str, Any]:
    import random

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import random

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

