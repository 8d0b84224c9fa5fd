"""The warm-start fine-tune trains only where the RL loss does: response_mask == 1.

A hand-built trial: a prompt, then a response made of model tokens (mask 1) with a run
of inserted tool output (mask 0) between them, as the proxy records a multi-turn
session. Fine-tuning must drive the loss on the mask-1 tokens down and leave the
inserted tokens unlearnt; the saved directory must load as an HF model with the base's
tokenizer and chat template.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord
from rlkit.train.sft import SftSettings, cache_key, finetune, masked_nats, taught_records, training_batch


def _record(rng: random.Random, task: str, vocab: int) -> TrialRecord:
    prompt = [rng.randrange(10, vocab) for _ in range(24)]
    model_a = [rng.randrange(10, vocab) for _ in range(16)]
    inserted = [rng.randrange(10, vocab) for _ in range(16)]
    model_b = [rng.randrange(10, vocab) for _ in range(8)]
    response = model_a + inserted + model_b
    mask = [1] * len(model_a) + [0] * len(inserted) + [1] * len(model_b)
    segment = TokenSegment(prompt_ids=prompt, response_ids=response, response_mask=mask,
                           response_logprobs=[0.0] * len(response), num_turns=2)
    return TrialRecord(uid=task, task_id=task, session=f"{task}-s", outcome=Outcome.PASSED, reward=1.0,
                       masked=False, segments=[segment], num_turns=2)


def _losses(model_dir: Path, records: list[TrialRecord]) -> tuple[float, float]:
    """(mean loss on mask-1 tokens, mean loss on mask-0 tokens) of a saved model."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    batch = training_batch(records, max_prompt=4096, max_response=4096, pad_id=0)
    flipped = training_batch(records, max_prompt=4096, max_response=4096, pad_id=0)
    flipped.response_mask = (1.0 - batch.response_mask) * (batch.responses != 0)
    with torch.no_grad():
        return float(masked_nats(model, batch)[0]), float(masked_nats(model, flipped)[0])


def test_finetune_lowers_loss_only_on_model_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(0)
    vocab = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
    records = [_record(rng, f"task-{i}", vocab) for i in range(2)]
    # a failed trial is a teacher example only as a decoy (a graded failure the teacher meant)
    failed = _record(rng, "failed", vocab).model_copy(update={"reward": 0.0, "outcome": Outcome.FAILED_TESTS})
    for decoys, rows in ((False, 2), (True, 3)):
        taught = taught_records(records + [failed], decoys=decoys)
        assert training_batch(taught, max_prompt=4096, max_response=4096, pad_id=0).rows == rows

    before_on, before_off = _losses(tiny_model_dir, records)
    settings = SftSettings(epochs=30, lr=3e-3, target_replay=1.0, decoys=False)
    losses = finetune(records + [failed], tiny_model_dir, tmp_path / "sft", settings, log=lambda _m: None)
    after_on, after_off = _losses(tmp_path / "sft", records)

    assert losses[-1] < losses[0] / 4
    assert after_on < before_on / 4          # the model tokens are learnt
    assert after_off > before_off * 0.8      # the inserted tool output is not
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json",
                 "model.safetensors"):
        assert (tmp_path / "sft" / name).is_file(), name


def test_all_zero_mask_gives_no_gradient(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    batch = training_batch([_record(random.Random(1), "t", 1000)], max_prompt=4096, max_response=4096, pad_id=0)
    batch.response_mask.zero_()  # every response token inserted, none sampled
    loss, _ = masked_nats(model, batch)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


@pytest.mark.parametrize("change", ["settings", "task", "model"])
def test_cache_key_follows_tasks_model_and_settings(change: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    import shutil

    repo = Path(__file__).resolve().parents[2]
    task = tmp_path / "tasks" / "word-frequency"
    shutil.copytree(repo / "examples" / "tasks" / "word-frequency", task)
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    key = cache_key([task], model, SftSettings())
    assert cache_key([task], model, SftSettings()) == key
    settings = SftSettings()
    if change == "settings":
        settings = SftSettings(lr=1e-4)
    elif change == "task":
        (task / "solution" / "solve.sh").write_text((task / "solution" / "solve.sh").read_text() + "\n# edit\n")
    else:
        (model / "config.json").write_text((model / "config.json").read_text() + " ")
    assert cache_key([task], model, settings) != key


def test_the_lm_head_runs_on_masked_tokens_only_and_the_loss_is_the_full_logits_one(tiny_model_dir: Path) -> None:
    """Two rows of different lengths (one padded): the loss and each row's sum equal the masked loss over
    every response position's logits, while the LM head saw only the mask-1 positions."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    rng = random.Random(2)
    records = [_record(rng, "a", 1000), _record(rng, "b", 1000)]
    records[1].segments[0].response_ids = records[1].segments[0].response_ids[:30]
    records[1].segments[0].response_mask = records[1].segments[0].response_mask[:30]
    records[1].segments[0].response_logprobs = records[1].segments[0].response_logprobs[:30]
    batch = training_batch(records, max_prompt=4096, max_response=4096, pad_id=0)
    seen: list[int] = []
    hook = model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(args[0].shape[0]))
    loss, per_row = masked_nats(model, batch)
    hook.remove()
    assert seen == [int(batch.response_mask.sum())] == [16 + 8 + 16 + 0]  # row b: 16 model tokens, then tool output

    with torch.no_grad():  # the reference: logits everywhere, the mask applied to the loss
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                       position_ids=batch.position_ids).logits[:, batch.prompt_width - 1:-1].float()
        every = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.responses, reduction="none")
        masked = every * batch.response_mask
    assert torch.allclose(per_row.detach(), masked.sum(dim=1), rtol=1e-5)
    assert torch.allclose(loss.detach(), masked.sum() / batch.response_mask.sum(), rtol=1e-5)
