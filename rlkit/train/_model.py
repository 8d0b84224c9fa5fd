"""The policy's forward for training: token log-probs and entropies of chosen positions.

Two paths, picked by UpdateFlags:
  * full logits (the plain HF path): `model(...).logits`, the whole [b, S, vocab] tensor, upcast
    to fp32, log-softmax, gather. Simple; memory and time grow with S x vocab.
  * hidden states, then lm_head + log-softmax in chunks over the chosen positions only (the
    loss tokens), each chunk under activation checkpointing, so at most chunk x vocab logits
    exist at a time, in the forward and in the backward.

Packed rows (no padding) go through the model as one [1, T] sequence whose position ids
restart per row; the attention function registered here ("rlkit_packed") attends within each
row only, one causal SDPA call per row, so no T x T mask is ever built.

`PolicyCore` wraps the HF causal LM so that, under FSDP2, one root forward owns the
embedding, final norm and lm_head (tied or not) and each decoder layer is its own unit.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

PACKED_ATTENTION = "rlkit_packed"
_BACKENDS = {"sdpa": None, "cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """Context preferring one SDPA kernel (falls back to the others where it cannot run)."""
    first = _BACKENDS.get(name)
    if first is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [getattr(SDPBackend, first)] + [b for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                                                         SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)
                                            if b.name != first]
    return sdpa_kernel(order, set_priority=True)


@torch.compiler.disable
def packed_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: Any, scaling: float | None = None, dropout: float = 0.0,
                     packed_bounds: tuple[int, ...] = (), **_: Any) -> tuple[torch.Tensor, None]:
    """Causal attention inside each packed row: query [1, H, T, D], key/value [1, Hkv, T, D]."""
    if not packed_bounds:
        packed_bounds = (0, query.shape[2])
    gqa = query.shape[1] != key.shape[1]
    out = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True,
                                          scale=scaling, enable_gqa=gqa)
           for s, e in itertools.pairwise(packed_bounds)]
    attn = out[0] if len(out) == 1 else torch.cat(out, dim=2)
    return attn.transpose(1, 2).contiguous(), None


def register_packed_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, lambda *args, **kwargs: None)  # rows, not masks


def _chunk_logprob_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                           entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = hidden @ weight.t()
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    with contextlib.nullcontext() if entropy_grad else torch.no_grad():
        probs = torch.exp(logits - lse.unsqueeze(-1))
        entropy = lse - (probs * logits).sum(-1)
    return logp, entropy


_compiled_chunk = None


def logprob_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, chunk: int | None,
                    entropy_grad: bool = False, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(label) and entropy per row of hidden [N, d] (fp32 [N] each); chunk=None: all at once."""
    fn = _chunk_logprob_entropy
    if compiled:
        global _compiled_chunk
        if _compiled_chunk is None:
            _compiled_chunk = torch.compile(_chunk_logprob_entropy, dynamic=True)
        fn = _compiled_chunk
    if chunk is None:
        return fn(hidden, weight, labels, entropy_grad)
    lps, ents = [], []
    for start in range(0, hidden.shape[0], chunk):
        h, y = hidden[start:start + chunk], labels[start:start + chunk]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(fn, h, weight, y, entropy_grad, use_reentrant=False)
        else:
            lp, ent = fn(h, weight, y, entropy_grad)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps), torch.cat(ents)


class PolicyCore(nn.Module):
    """The HF causal LM plus the training forward (see the module doc)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, *, input_ids: torch.Tensor, position_ids: torch.Tensor, select: torch.Tensor,
                labels: torch.Tensor, attention_mask: torch.Tensor | None = None,
                packed_bounds: tuple[int, ...] | None = None, full_logits: bool = False, chunk: int | None = None,
                entropy_grad: bool = False, compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(logp, entropy) for positions `select` (a flat index into the [B*S] stream) predicting `labels`."""
        if full_logits:
            logits = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=False).logits
            flat = logits.reshape(-1, logits.shape[-1])[select].float()
            logp_all = torch.log_softmax(flat, dim=-1)
            logp = logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        extra = {"packed_bounds": packed_bounds} if packed_bounds is not None else {}
        hidden = self.lm.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False, **extra).last_hidden_state
        hidden = hidden.reshape(-1, hidden.shape[-1])[select]
        return logprob_entropy(hidden, self.lm.lm_head.weight, labels, chunk=chunk, entropy_grad=entropy_grad,
                               compiled=compiled)
