"""PolicyUpdater on the CPU with the tiny Qwen3: every speed path computes the same thing."""

from __future__ import annotations

import pytest
import torch

from rlkit.train._model import logprob_entropy
from rlkit.train.algo import AlgoConfig
from rlkit.train.batch import batch_from_rows
from rlkit.train.policy import OptimConfig, PolicyUpdater, UpdateFlags

FLAGS = {
    "plain": UpdateFlags.plain(),
    "padded_chunked": UpdateFlags(packing=False, micro_batch_rows=2, logprob_chunk=5),
    "packed": UpdateFlags(micro_batch_tokens=40, logprob_chunk=5),
    "packed_ckpt": UpdateFlags(micro_batch_tokens=40, logprob_chunk=5, activation_checkpointing=True),
}


def make_batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(6):
        p, r = 4 + i, 6 + 2 * i
        mask = [1] * r
        mask[2:4] = [0, 0]
        rows.append((f"g{i // 3}", float(i % 2), torch.randint(0, vocab, (p,), generator=g).tolist(),
                     torch.randint(0, vocab, (r,), generator=g).tolist(), mask, [-8.0] * r))
    return batch_from_rows(rows, pad_id=0)


def on_policy(updater: PolicyUpdater, batch):
    """old_log_probs := the model's own, as if it had sampled the batch (ratio 1 at the start)."""
    lp, _ = updater._token_stats(updater.core, batch, batch.response_mask > 0, entropy_grad=False)
    batch.old_log_probs = lp.detach() * batch.response_mask
    return batch


def test_chunked_logprob_equals_full():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(23, 16, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (23,), generator=g)
    full_lp, full_ent = logprob_entropy(hidden, weight, labels, chunk=None, entropy_grad=True)
    logits = hidden @ weight.t()
    torch.testing.assert_close(full_lp, torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0])
    torch.testing.assert_close(full_ent, torch.distributions.Categorical(logits=logits).entropy())
    (full_lp.sum() + full_ent.sum()).backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    lp, ent = logprob_entropy(hidden, weight, labels, chunk=5, entropy_grad=True)
    torch.testing.assert_close(lp, full_lp)
    torch.testing.assert_close(ent, full_ent)
    (lp.sum() + ent.sum()).backward()
    torch.testing.assert_close(hidden.grad, grads[0])
    torch.testing.assert_close(weight.grad, grads[1])


def test_every_path_gives_the_same_log_probs_loss_and_step(tiny_model_dir):
    results = {}
    for name, flags in FLAGS.items():
        updater = PolicyUpdater(tiny_model_dir, AlgoConfig(), OptimConfig(lr=1e-3), flags=flags)
        batch = make_batch(updater.model.config.vocab_size)
        lp, ent = updater._token_stats(updater.core, batch, batch.response_mask > 0, entropy_grad=False)
        grads: list[dict[str, torch.Tensor]] = []
        step = updater._clip_and_step

        def record_grads(step=step, grads=grads, model=updater.model):
            grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
            return step()

        updater._clip_and_step = record_grads
        metrics = updater.update(batch, mini_batches=2)
        results[name] = (lp.detach(), ent, metrics, grads)
    ref_lp, ref_ent, ref_m, ref_g = results["plain"]
    assert len(ref_g) == 2  # two mini-batches, two optimizer steps
    for name, (lp, ent, m, g) in results.items():
        torch.testing.assert_close(lp, ref_lp, atol=2e-5, rtol=1e-5, msg=name)
        torch.testing.assert_close(ent, ref_ent, atol=2e-5, rtol=1e-5, msg=name)
        assert m["actor/pg_loss"] == pytest.approx(ref_m["actor/pg_loss"], abs=1e-6), name
        assert m["actor/grad_norm"] == pytest.approx(ref_m["actor/grad_norm"], rel=1e-4), name
        assert [sorted(x) for x in g] == [sorted(x) for x in ref_g], name
        # the first step's gradients (the second starts from weights one Adam step apart)
        for key, want in ref_g[0].items():
            torch.testing.assert_close(g[0][key], want, atol=1e-5, rtol=1e-3, msg=f"{name} {key}")


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo"])
def test_updates_lower_the_loss_and_change_the_weights(tiny_model_dir, loss_mode):
    algo = AlgoConfig(loss_mode=loss_mode, clip_ratio_low=0.2, clip_ratio_high=0.2, kl_loss_coef=0.01)
    updater = PolicyUpdater(tiny_model_dir, algo, OptimConfig(lr=3e-3, grad_clip=10.0), flags=FLAGS["packed"])
    before = {k: v.clone() for k, v in updater.model.state_dict().items()}
    batch = on_policy(updater, make_batch(updater.model.config.vocab_size))
    first = updater.update(batch, mini_batches=1)
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # the reference is the starting policy
    losses = [first["actor/pg_loss"]] + [updater.update(batch, mini_batches=1)["actor/pg_loss"] for _ in range(3)]
    assert losses[-1] < losses[0]
    assert updater.global_step == 4
    assert any(not torch.equal(before[k], v) for k, v in updater.model.state_dict().items())
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/lr",
                "actor/kl_loss"):
        assert key in first


def test_log_probs_probe_matches_the_training_forward(tiny_model_dir):
    updater = PolicyUpdater(tiny_model_dir, AlgoConfig(), flags=FLAGS["packed"])
    batch = make_batch(updater.model.config.vocab_size)
    row = batch.select([2])
    ids = row.input_ids[0][row.attention_mask[0] > 0]
    probe = updater.log_probs(ids, start=int(row.prompt_lengths[0]))
    lp, _ = updater._token_stats(updater.core, row, row.attention_mask[:, row.prompt_width:] > 0,
                                 entropy_grad=False)
    torch.testing.assert_close(probe, lp[0])
    plain = PolicyUpdater(tiny_model_dir, AlgoConfig(), flags=FLAGS["plain"])
    torch.testing.assert_close(plain.log_probs(ids, start=4), updater.log_probs(ids, start=4), atol=2e-5, rtol=1e-5)


def test_the_entropy_bonus_trains(tiny_model_dir):
    """With entropy_coeff != 0 the bonus reaches the gradient: the update differs from coeff 0's by
    exactly the entropy term's own gradient (a detached entropy would leave them equal)."""
    def first_grads(coeff: float) -> dict[str, torch.Tensor]:
        updater = PolicyUpdater(tiny_model_dir, AlgoConfig(entropy_coeff=coeff), OptimConfig(lr=0.0),
                                flags=FLAGS["packed"])
        batch = on_policy(updater, make_batch(updater.model.config.vocab_size))
        grads: dict[str, torch.Tensor] = {}

        def record() -> float:
            grads.update({k: p.grad.clone() for k, p in updater.model.named_parameters() if p.grad is not None})
            return 0.0

        updater._clip_and_step = record
        updater.update(batch, mini_batches=1)
        return grads

    plain, bonus = first_grads(0.0), first_grads(0.1)
    moved = max(float((bonus[k] - plain[k]).abs().max()) for k in plain)
    assert moved > 1e-6, "the entropy bonus left the gradient unchanged"
