"""The step's trials as training tensors: one row per trainable token segment.

Row layout (padded form), as in verl's actor batches:
  input_ids      [B, P + R]  prompt left-padded to P, response right-padded to R
  attention_mask [B, P + R]  1 on real tokens
  position_ids   [B, P + R]  0.. along the real tokens of each row
  responses, response_mask, old_log_probs, token_level_rewards   [B, R]
  uid            [B]         the GRPO group of each row (TrialRecord.uid)

P and R are the longest prompt and response in the batch after truncation, never more than
`max_prompt` / `max_response`. Truncation, per segment:
  * a prompt longer than `max_prompt` keeps its LAST `max_prompt` tokens (the recent context
    the response was sampled from; the system prompt at the start is what is lost);
  * a response longer than `max_response` keeps its FIRST `max_response` tokens (mask and
    vLLM logprobs cut alike), so the reward lands on the last kept token.

One row per trainable trial: its training segment (`TrialRecord.training_segment`, the longest
chain; the rule of `rlkit.rollout.records`, which the verl bridge follows too), carrying the
trial's reward on its last response token. So a trial is one member of its GRPO group however
many segments the proxy recorded.

The packed form (`TrainBatch.packed`) concatenates rows' real tokens with no padding, with
position ids restarting at 0 per row and `cu_seqlens` marking the boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from rlkit.rollout.records import TrialRecord


@dataclass
class PackedBatch:
    """Rows' real tokens end to end: what a varlen (no padding) forward reads."""

    input_ids: torch.Tensor       # [1, T]
    position_ids: torch.Tensor    # [1, T], restart at 0 per row
    cu_seqlens: torch.Tensor      # [n + 1] int32, row boundaries in the packed stream
    max_seqlen: int
    logit_index: torch.Tensor     # [B, R] long: packed position whose logits predict responses[b, r] (0 on padding)

    def to(self, device: Any) -> PackedBatch:
        return replace(self, input_ids=self.input_ids.to(device), position_ids=self.position_ids.to(device),
                       cu_seqlens=self.cu_seqlens.to(device), logit_index=self.logit_index.to(device))


@dataclass
class TrainBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    old_log_probs: torch.Tensor
    token_level_rewards: torch.Tensor
    uid: np.ndarray
    prompt_lengths: torch.Tensor    # [B] real prompt tokens per row
    response_lengths: torch.Tensor  # [B] real response tokens per row
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.responses.shape[0])

    @property
    def prompt_width(self) -> int:
        return int(self.input_ids.shape[1] - self.responses.shape[1])

    def num_tokens(self) -> int:
        return int((self.prompt_lengths + self.response_lengths).sum())

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """A sub-batch (mini- or micro-batch), trimmed to its own longest prompt and response."""
        import torch

        idx = torch.as_tensor(list(rows), dtype=torch.long)
        p_keep = int(self.prompt_lengths[idx].max()) if len(idx) else 0
        r_keep = int(self.response_lengths[idx].max()) if len(idx) else 0
        p0, width = self.prompt_width - p_keep, self.prompt_width + r_keep

        def cut(t: torch.Tensor | None, lo: int, hi: int) -> torch.Tensor | None:
            return None if t is None else t[idx, lo:hi]

        return TrainBatch(
            input_ids=cut(self.input_ids, p0, width), attention_mask=cut(self.attention_mask, p0, width),
            position_ids=cut(self.position_ids, p0, width), responses=cut(self.responses, 0, r_keep),
            response_mask=cut(self.response_mask, 0, r_keep), old_log_probs=cut(self.old_log_probs, 0, r_keep),
            token_level_rewards=cut(self.token_level_rewards, 0, r_keep), uid=self.uid[idx.numpy()],
            prompt_lengths=self.prompt_lengths[idx], response_lengths=self.response_lengths[idx],
            advantages=cut(self.advantages, 0, r_keep), returns=cut(self.returns, 0, r_keep),
            ref_log_probs=cut(self.ref_log_probs, 0, r_keep), meta=dict(self.meta))

    def to(self, device: Any) -> TrainBatch:
        import torch

        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return TrainBatch(**moved)

    def packed(self) -> PackedBatch:
        """No-padding form of these rows (built on the CPU; move it with `.to`)."""
        import torch

        ids, pos, bounds = [], [], [0]
        logit_index = torch.zeros(self.responses.shape, dtype=torch.long)
        width = self.prompt_width
        for b in range(self.rows):
            p, r = int(self.prompt_lengths[b]), int(self.response_lengths[b])
            ids.append(self.input_ids[b, width - p: width + r].cpu())
            pos.append(torch.arange(p + r))
            start = bounds[-1]
            # logits at position t predict token t + 1; response token j sits at start + p + j
            logit_index[b, :r] = torch.arange(start + p - 1, start + p + r - 1)
            bounds.append(start + p + r)
        lengths = [bounds[i + 1] - bounds[i] for i in range(self.rows)]
        return PackedBatch(input_ids=torch.cat(ids).unsqueeze(0), position_ids=torch.cat(pos).unsqueeze(0),
                           cu_seqlens=torch.tensor(bounds, dtype=torch.int32), max_seqlen=max(lengths, default=0),
                           logit_index=logit_index)


def build_batch(records: Sequence[TrialRecord], *, max_prompt: int, max_response: int, pad_id: int) -> TrainBatch:
    """One row per trainable record: its training segment (see the module doc)."""
    rows: list[tuple[str, float, list[int], list[int], list[int], list[float]]] = []
    dropped = 0
    for record in records:
        seg = record.training_segment()
        if seg is None:
            continue
        dropped += record.dropped_model_tokens
        prompt = seg.prompt_ids[-max_prompt:] if max_prompt > 0 else []
        n = min(len(seg.response_ids), max_response)
        rows.append((record.uid, float(record.reward), prompt, seg.response_ids[:n], seg.response_mask[:n],
                     seg.response_logprobs[:n]))
    batch = batch_from_rows(rows, pad_id=pad_id)
    batch.meta["dropped_model_tokens"] = dropped
    return batch


def batch_from_rows(rows: Sequence[tuple[str, float, Sequence[int], Sequence[int], Sequence[int], Sequence[float]]],
                    *, pad_id: int) -> TrainBatch:
    """(uid, reward, prompt_ids, response_ids, response_mask, response_logprobs) per row -> TrainBatch."""
    import numpy as np
    import torch

    n = len(rows)
    p_width = max((len(r[2]) for r in rows), default=0)
    r_width = max((len(r[3]) for r in rows), default=0)
    input_ids = torch.full((n, p_width + r_width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p_width + r_width), dtype=torch.long)
    responses = torch.full((n, r_width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((n, r_width), dtype=torch.float32)
    old_log_probs = torch.zeros((n, r_width), dtype=torch.float32)
    rewards = torch.zeros((n, r_width), dtype=torch.float32)
    p_len = torch.zeros(n, dtype=torch.long)
    r_len = torch.zeros(n, dtype=torch.long)
    for b, (_, reward, prompt, response, mask, logprobs) in enumerate(rows):
        p, r = len(prompt), len(response)
        p_len[b], r_len[b] = p, r
        if p:
            input_ids[b, p_width - p: p_width] = torch.tensor(prompt, dtype=torch.long)
        input_ids[b, p_width: p_width + r] = torch.tensor(response, dtype=torch.long)
        attention_mask[b, p_width - p: p_width + r] = 1
        responses[b, :r] = torch.tensor(response, dtype=torch.long)
        response_mask[b, :r] = torch.tensor(mask, dtype=torch.float32)
        old_log_probs[b, :r] = torch.tensor(logprobs, dtype=torch.float32)
        if r:
            rewards[b, r - 1] = reward
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return TrainBatch(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      responses=responses, response_mask=response_mask, old_log_probs=old_log_probs,
                      token_level_rewards=rewards, uid=np.array([r[0] for r in rows], dtype=object),
                      prompt_lengths=p_len, response_lengths=r_len)
