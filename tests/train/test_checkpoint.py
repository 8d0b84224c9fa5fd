"""Checkpoints: verl's actor layout, a full round trip, and verl's own merger rebuilds the weights."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import torch

from rlkit.train.algo import AlgoConfig
from rlkit.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rlkit.train.policy import OptimConfig, PolicyUpdater, UpdateFlags
from tests.train.test_policy import make_batch

FLAGS = UpdateFlags(micro_batch_tokens=64)


def trained(tiny_model_dir, steps: int = 2) -> PolicyUpdater:
    updater = PolicyUpdater(tiny_model_dir, AlgoConfig(), OptimConfig(lr=1e-3), flags=FLAGS)
    for _ in range(steps):
        updater.update(make_batch(updater.model.config.vocab_size), mini_batches=1)
    return updater


def test_layout_and_round_trip(tiny_model_dir, tmp_path):
    updater = trained(tiny_model_dir)
    assert latest_checkpoint(tmp_path) is None
    path = save_checkpoint(tmp_path, 7, updater, {"sampler": {"epoch": 1, "position": 5}})
    actor = path / "actor"
    for name in ("model", "optim", "extra_state"):
        assert (actor / f"{name}_world_size_1_rank_0.pt").is_file()
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 1
    assert (actor / "huggingface" / "config.json").is_file()
    assert (actor / "huggingface" / "chat_template.jinja").is_file()
    assert (actor / "huggingface" / "tokenizer.json").is_file()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "7"
    assert latest_checkpoint(tmp_path) == (7, path)

    # what happens next in the saving run
    batch = make_batch(updater.model.config.vocab_size, seed=5)
    next_metrics = updater.update(batch, mini_batches=1)
    next_weights = {k: v.clone() for k, v in updater.model.state_dict().items()}

    fresh = PolicyUpdater(tiny_model_dir, AlgoConfig(), OptimConfig(lr=1e-3), flags=FLAGS)
    torch.manual_seed(0)
    extra = load_checkpoint(path, fresh)
    assert extra == {"sampler": {"epoch": 1, "position": 5}}
    assert fresh.global_step == 2
    assert fresh.optimizer.state_dict()["state"][0]["step"] == 2
    restored = fresh.state_dict_for_checkpoint()["extra"]["rng"]
    assert torch.equal(restored["torch"], torch.load(actor / "extra_state_world_size_1_rank_0.pt",
                                                     weights_only=False)["rng"]["torch"])
    # the resumed run takes the same next step as the run that saved
    got = fresh.update(make_batch(fresh.model.config.vocab_size, seed=5), mini_batches=1)
    assert got["actor/pg_loss"] == next_metrics["actor/pg_loss"]
    for key, value in fresh.model.state_dict().items():
        torch.testing.assert_close(value, next_weights[key], rtol=0, atol=0)


def test_rng_state_is_restored(tiny_model_dir, tmp_path):
    updater = trained(tiny_model_dir, steps=1)
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    path = save_checkpoint(tmp_path, 1, updater, {})
    want = (torch.rand(4), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    load_checkpoint(path, updater)
    got = (torch.rand(4), random.random(), np.random.rand())
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]


def test_verl_model_merger_rebuilds_the_trainers_weights(tiny_model_dir, tmp_path):
    updater = trained(tiny_model_dir)
    path = save_checkpoint(tmp_path / "ckpt", 2, updater, {})
    out = tmp_path / "merged"
    subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                    "--local_dir", str(path / "actor"), "--target_dir", str(out)], check=True)
    from safetensors.torch import load_file

    merged = {}
    for file in out.glob("*.safetensors"):
        merged.update(load_file(file))
    trainer = updater.full_state_dict()
    assert set(merged) == set(trainer)
    for key, value in trainer.items():
        # verl's merger writes bf16: the trainer's weights, rounded the same way
        torch.testing.assert_close(merged[key], value.to(torch.bfloat16), rtol=0, atol=0, msg=key)
    assert (out / "tokenizer.json").is_file()
