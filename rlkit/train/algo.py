"""Advantages and the policy loss: verl's `core_algos`, called with the embedded trainer's batch.

Nothing here re-derives the math. `compute_advantages` is core_algos' registered advantage
estimator; `policy_loss` composes core_algos' registered policy loss, `agg_loss` and
`kl_penalty` exactly as verl's actor does (verl/workers/utils/losses.py: ppo_loss):
    loss = pg_loss - entropy_coeff * entropy_loss + kl_loss_coef * kl_loss
with the global-batch normalisation (`global_batch_info`) that makes gradient accumulation
over micro-batches (and data-parallel ranks) equal to one pass over the mini-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkit.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from rlkit.train.batch import TrainBatch

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# GSPO per verl's examples/gspo_trainer (the same numbers rlkit.launch.verl_overrides passes to verl).
GSPO_CLIP = (3e-4, 4e-4)


@dataclass(frozen=True)
class AlgoConfig:
    adv_estimator: str = "grpo"
    loss_mode: str = "vanilla"          # a core_algos policy loss: vanilla | gspo | ...
    loss_agg_mode: str = "token-mean"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    norm_adv_by_std_in_grpo: bool = True

    @property
    def use_kl_loss(self) -> bool:
        return self.kl_loss_coef > 0

    @classmethod
    def from_run_config(cls, cfg: Any) -> AlgoConfig:
        """ALGORITHM, KL_LOSS_COEF and LOSS_AGG_MODE of a resolved RunConfig."""
        algorithm = str(getattr(cfg.ALGORITHM, "value", cfg.ALGORITHM))
        agg = str(getattr(cfg.LOSS_AGG_MODE, "value", cfg.LOSS_AGG_MODE))
        agg = "" if agg == "auto" else agg
        if algorithm == "ppo":
            raise ConfigError("ALGORITHM=ppo needs a critic (GAE), which the local trainer does not train",
                              key="ALGORITHM", fix="set ALGORITHM=grpo or ALGORITHM=gspo for TRAINER=local")
        if algorithm == "gspo":
            low, high = GSPO_CLIP
            return cls(loss_mode="gspo", loss_agg_mode=agg or "seq-mean-token-mean", clip_ratio_low=low,
                       clip_ratio_high=high, kl_loss_coef=float(cfg.KL_LOSS_COEF))
        return cls(loss_mode="vanilla", loss_agg_mode=agg or "token-mean", kl_loss_coef=float(cfg.KL_LOSS_COEF))


def compute_advantages(batch: TrainBatch, algo: AlgoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), [B, R], from core_algos' estimator named by `algo.adv_estimator`."""
    from rlkit.train._verl import core_algos

    estimator = core_algos().get_adv_estimator_fn(algo.adv_estimator)
    return estimator(token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask,
                     index=batch.uid, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo)


def global_batch_info(*, dp_size: int, batch_num_tokens: int | None, global_batch_size: int | None) -> dict:
    """What verl's actor puts in ActorConfig.global_batch_info for one mini-batch."""
    return {"dp_size": dp_size, "batch_num_tokens": batch_num_tokens, "global_batch_size": global_batch_size,
            "loss_scale_factor": None}


def actor_config(algo: AlgoConfig, batch_info: dict | None = None) -> Any:
    from rlkit.train._verl import actor_config as make
    from rlkit.train._verl import policy_loss_config

    config = make(policy_loss=policy_loss_config(loss_mode=algo.loss_mode), clip_ratio=algo.clip_ratio_low, clip_ratio_low=algo.clip_ratio_low,
                  clip_ratio_high=algo.clip_ratio_high, clip_ratio_c=algo.clip_ratio_c,
                  loss_agg_mode=algo.loss_agg_mode, entropy_coeff=algo.entropy_coeff,
                  use_kl_loss=algo.use_kl_loss, kl_loss_coef=algo.kl_loss_coef, kl_loss_type=algo.kl_loss_type)
    if batch_info:
        config.global_batch_info.update(batch_info)
    return config


def policy_loss(*, old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, algo: AlgoConfig, entropy: torch.Tensor | None = None,
                ref_log_prob: torch.Tensor | None = None, batch_info: dict | None = None,
                config: Any = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """(loss to backward, metrics): verl's ppo_loss composition on [b, R] tensors.

    Metric values are detached tensors or floats: actor/pg_loss, actor/pg_clipfrac, actor/ppo_kl,
    actor/pg_clipfrac_lower, actor/entropy_loss (when entropy is given), actor/kl_loss (KL on)."""
    from rlkit.train._verl import core_algos

    ca = core_algos()
    config = config if config is not None else actor_config(algo, batch_info)
    mask = response_mask.to(bool)
    pg_loss, pg_metrics = ca.get_policy_loss_fn(algo.loss_mode)(
        old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=mask,
        loss_agg_mode=algo.loss_agg_mode, config=config)
    metrics: dict[str, Any] = dict(pg_metrics)
    metrics["actor/pg_loss"] = pg_loss.detach()
    loss = pg_loss
    if entropy is not None:
        entropy_loss = ca.agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=algo.loss_agg_mode,
                                   **config.global_batch_info)
        loss = loss - algo.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = entropy_loss.detach()
    if algo.use_kl_loss:
        if ref_log_prob is None:
            raise ValueError("KL_LOSS_COEF > 0 needs the reference policy's log-probs")
        kld = ca.kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=algo.kl_loss_type)
        kl_loss = ca.agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=algo.loss_agg_mode,
                              **config.global_batch_info)
        loss = loss + kl_loss * algo.kl_loss_coef
        metrics["actor/kl_loss"] = kl_loss.detach()
        metrics["actor/kl_coef"] = algo.kl_loss_coef
    return loss, metrics
