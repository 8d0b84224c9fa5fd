"""Trial records become verl-shaped rows: one per trainable trial (its longest chain), left-padded prompts,
truncation."""

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
        record("a", 0.0, [seg([1, 2], [8, 9]), seg([1, 2, 8, 9, 10], [11], [1])]),  # two segments: the longer
        record("b", 0.0, [seg([5], [6])], outcome=Outcome.SANDBOX_ERROR, masked=True),  # infra: skipped
        record("b", 1.0, [seg([5], [6, 7], [0, 0])]),  # no sampled token: nothing to train
    ]
    b = build_batch(records, max_prompt=100, max_response=100, pad_id=PAD)
    assert b.rows == 2 and list(b.uid) == ["a", "a"]
    assert b.input_ids.shape == (2, 3 + 4)
    assert b.input_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert b.input_ids[1].tolist() == [PAD, 1, 2, 8, 9, PAD, PAD]
    assert b.meta["dropped_model_tokens"] == 1  # the shorter segment's one sampled token
    assert b.position_ids[0].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert b.response_mask[0].tolist() == [1, 0, 1, 1]
    assert b.old_log_probs[0].tolist() == [-0.5, 0.0, -0.5, -0.5]
    assert b.token_level_rewards[0].tolist() == [0, 0, 0, 1.0]  # on the last response token
    assert b.token_level_rewards[1].sum() == 0 and b.response_lengths.tolist() == [4, 2]


def test_a_trial_of_several_segments_is_one_member_of_its_group():
    """GRPO's group statistics count each trial once: a pass split into three segments and a
    failure give advantages +a / -a (two members), not the 3:1 group a row per segment made."""
    from rlkit.train.algo import AlgoConfig, compute_advantages

    split = record("g", 1.0, [seg([1], [2, 3]), seg([1, 2, 3, 4], [5, 6, 7]), seg([9], [8])])
    failed = record("g", 0.0, [seg([1], [4, 4])])
    b = build_batch([split, failed], max_prompt=100, max_response=100, pad_id=PAD)
    assert b.rows == 2 and b.responses[0, :3].tolist() == [5, 6, 7]  # the longest chain
    adv, _ = compute_advantages(b, AlgoConfig())
    pos, neg = float(adv[0, 0]), float(adv[1, 0])
    assert pos > 0 and neg == -pos  # two members, rewards 1 and 0: symmetric


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
