"""Advantages and losses are verl's core_algos, called on a hand-built batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlkit.errors import ConfigError
from rlkit.train import algo as algo_mod
from rlkit.train._verl import core_algos
from rlkit.train.algo import AlgoConfig, compute_advantages, global_batch_info, policy_loss
from rlkit.train.batch import batch_from_rows


def hand_batch():
    g = torch.Generator().manual_seed(3)
    rows = []
    for i, reward in enumerate([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]):
        n = 5 + i
        mask = [1] * n
        mask[1] = 0  # a tool-output token between calls
        rows.append((f"task{i // 3}", reward, [7, 8, 9], torch.randint(10, 99, (n,), generator=g).tolist(), mask,
                     (-torch.rand(n, generator=g)).tolist()))
    batch = batch_from_rows(rows, pad_id=0)
    log_prob = batch.old_log_probs + 0.3 * torch.randn(batch.old_log_probs.shape, generator=g)
    entropy = torch.rand(batch.old_log_probs.shape, generator=g) * 3
    ref = batch.old_log_probs - 0.2 * torch.rand(batch.old_log_probs.shape, generator=g)
    return batch, log_prob, entropy, ref


def test_grpo_advantage_is_verls():
    batch, *_ = hand_batch()
    ca = core_algos()
    for norm in (True, False):
        algo = AlgoConfig(norm_adv_by_std_in_grpo=norm)
        adv, ret = compute_advantages(batch, algo)
        want, want_ret = ca.compute_grpo_outcome_advantage(
            token_level_rewards=batch.token_level_rewards.clone(), response_mask=batch.response_mask,
            index=np.array(batch.uid), norm_adv_by_std_in_grpo=norm)
        torch.testing.assert_close(adv, want, rtol=0, atol=0)
        torch.testing.assert_close(ret, want_ret, rtol=0, atol=0)
    assert adv.abs().sum() > 0  # the groups have both outcomes: the check is not vacuous


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("kl", [0.0, 0.05])
def test_policy_loss_is_verls_composition(loss_mode, agg, kl):
    batch, log_prob, entropy, ref = hand_batch()
    algo = AlgoConfig(loss_mode=loss_mode, loss_agg_mode=agg, kl_loss_coef=kl, entropy_coeff=0.01,
                      clip_ratio_low=0.1, clip_ratio_high=0.15)
    adv, _ = compute_advantages(batch, algo)
    info = global_batch_info(dp_size=1, batch_num_tokens=int(batch.response_mask.sum()),
                             global_batch_size=batch.rows)
    loss, metrics = policy_loss(old_log_prob=batch.old_log_probs, log_prob=log_prob, advantages=adv,
                                response_mask=batch.response_mask, algo=algo, entropy=entropy, ref_log_prob=ref,
                                batch_info=info)

    # verl's actor (verl/workers/utils/losses.py: ppo_loss), written out with core_algos directly
    from verl.workers.config import ActorConfig, PolicyLossConfig

    ca = core_algos()
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.1,
                         clip_ratio_low=0.1, clip_ratio_high=0.15, loss_agg_mode=agg,
                         policy_loss=PolicyLossConfig(loss_mode=loss_mode))
    config.global_batch_info.update(info)
    mask = batch.response_mask.bool()
    pg_loss, pg_metrics = ca.get_policy_loss_fn(loss_mode)(
        old_log_prob=batch.old_log_probs, log_prob=log_prob, advantages=adv, response_mask=mask,
        loss_agg_mode=agg, config=config)
    want = pg_loss - 0.01 * ca.agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=agg, **info)
    if kl:
        kld = ca.kl_penalty(logprob=log_prob, ref_logprob=ref, kl_penalty="low_var_kl")
        want = want + kl * ca.agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=agg, **info)
        assert "actor/kl_loss" in metrics
    torch.testing.assert_close(loss, want, rtol=0, atol=0)
    torch.testing.assert_close(metrics["actor/pg_loss"], pg_loss.detach(), rtol=0, atol=0)
    for name, value in pg_metrics.items():
        assert metrics[name] == value


def test_loss_goes_through_core_algos(monkeypatch):
    """A changed core_algos changes our loss: nothing is re-derived on our side."""
    batch, log_prob, _, _ = hand_batch()
    algo = AlgoConfig()
    adv, _ = compute_advantages(batch, algo)
    ca = core_algos()
    calls = []

    def fake_loss(**kwargs):
        calls.append(kwargs["loss_agg_mode"])
        return torch.tensor(123.0), {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}

    monkeypatch.setattr(ca, "get_policy_loss_fn", lambda name: fake_loss)
    loss, _ = policy_loss(old_log_prob=batch.old_log_probs, log_prob=log_prob, advantages=adv,
                          response_mask=batch.response_mask, algo=algo)
    assert float(loss) == 123.0 and calls == ["token-mean"]

    monkeypatch.setattr(ca, "get_adv_estimator_fn", lambda name: lambda **kw: ("adv", name))
    assert compute_advantages(batch, algo) == ("adv", "grpo")


def test_from_run_config():
    class Cfg:
        ALGORITHM = "gspo"
        KL_LOSS_COEF = 0.01
        LOSS_AGG_MODE = "auto"

    gspo = AlgoConfig.from_run_config(Cfg)
    assert (gspo.loss_mode, gspo.loss_agg_mode, gspo.kl_loss_coef) == ("gspo", "seq-mean-token-mean", 0.01)
    assert (gspo.clip_ratio_low, gspo.clip_ratio_high) == algo_mod.GSPO_CLIP
    Cfg.ALGORITHM, Cfg.LOSS_AGG_MODE = "grpo", "seq-mean-token-sum"
    grpo = AlgoConfig.from_run_config(Cfg)
    assert (grpo.loss_mode, grpo.loss_agg_mode, grpo.adv_estimator) == ("vanilla", "seq-mean-token-sum", "grpo")
    Cfg.ALGORITHM = "ppo"
    with pytest.raises(ConfigError):
        AlgoConfig.from_run_config(Cfg)
