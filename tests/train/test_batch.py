"""Trial records become verl-shaped rows: one per trainable segment, left-padded prompts, truncation."""

from __future__ import annotations

import torch

from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord
from rlkit.train.batch import build_batch

PAD = 0


def seg(prompt, response, mask=None):
    mask = mask or [1] * len(response)
    return TokenSegment(prompt_ids=prompt, response_ids=response, response_mask=mask,
                        response_logprobs=[-0.5 * m for m in mask])


def record(uid, reward, segments, outcome=Outcome.PASSED, masked=False):
    return TrialRecord(uid=uid, task_id="t", session=f"s-{uid}-{reward}", outcome=outcome, reward=reward,
                       masked=masked, segments=segments)


def test_rows_layout_rewards_and_groups():
    records = [
        record("a", 1.0, [seg([1, 2, 3], [4, 5, 6, 7], [1, 0, 1, 1])]),
        record("a", 0.0, [seg([1, 2], [8, 9]), seg([1, 2, 8, 9, 10], [11], [1])]),  # two segments: two rows
        record("b", 0.0, [seg([5], [6])], outcome=Outcome.SANDBOX_ERROR, masked=True),  # infra: skipped
        record("b", 1.0, [seg([5], [6, 7], [0, 0])]),  # no sampled token: nothing to train
    ]
    b = build_batch(records, max_prompt=100, max_response=100, pad_id=PAD)
    assert b.rows == 3 and list(b.uid) == ["a", "a", "a"]
    assert b.input_ids.shape == (3, 5 + 4)
    assert b.input_ids[0].tolist() == [PAD, PAD, 1, 2, 3, 4, 5, 6, 7]
    assert b.attention_mask[1].tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0]
    assert b.position_ids[0, 2:].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert b.response_mask[0].tolist() == [1, 0, 1, 1]
    assert b.old_log_probs[0].tolist() == [-0.5, 0.0, -0.5, -0.5]
    assert b.token_level_rewards[0].tolist() == [0, 0, 0, 1.0]  # on the last response token
    assert b.token_level_rewards[1].sum() == 0 and b.response_lengths.tolist() == [4, 2, 1]


def test_truncation_keeps_recent_prompt_and_first_response_tokens():
    rec = record("a", 1.0, [seg(list(range(1, 11)), list(range(20, 30)), [1, 0] * 5)])
    b = build_batch([rec], max_prompt=4, max_response=6, pad_id=PAD)
    assert b.input_ids[0].tolist() == [7, 8, 9, 10, 20, 21, 22, 23, 24, 25]
    assert b.response_mask[0].tolist() == [1, 0, 1, 0, 1, 0]
    assert b.token_level_rewards[0].tolist() == [0, 0, 0, 0, 0, 1.0]


def test_packed_form_holds_the_same_tokens_without_padding():
    records = [record("a", 1.0, [seg([1, 2, 3], [4, 5])]), record("a", 0.0, [seg([1], [6, 7, 8, 9])])]
    b = build_batch(records, max_prompt=100, max_response=100, pad_id=PAD)
    p = b.packed()
    assert p.input_ids.tolist() == [[1, 2, 3, 4, 5, 1, 6, 7, 8, 9]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3, 4]]
    assert p.cu_seqlens.tolist() == [0, 5, 10] and p.max_seqlen == 5
    # the logits at logit_index[b, j] predict responses[b, j]
    flat = p.input_ids[0]
    for row in range(b.rows):
        n = int(b.response_lengths[row])
        assert flat[p.logit_index[row, :n] + 1].tolist() == b.responses[row, :n].tolist()


def test_select_trims_to_the_sub_batch():
    records = [record("a", 1.0, [seg([1] * 6, [2] * 2)]), record("b", 0.0, [seg([3], [4] * 5)])]
    b = build_batch(records, max_prompt=100, max_response=100, pad_id=PAD)
    sub = b.select([1])
    assert sub.input_ids.tolist() == [[3, 4, 4, 4, 4, 4]]
    assert sub.responses.shape == (1, 5) and list(sub.uid) == ["b"]
    assert torch.equal(sub.packed().input_ids, torch.tensor([[3, 4, 4, 4, 4, 4]]))
