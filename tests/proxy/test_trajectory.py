"""Segment assembly: prefix merging, masks, logprobs, breaks."""

from __future__ import annotations

import pytest

from rlkit.proxy.trajectory import CallRecord, assemble, full_prompt_ids


def call(index: int, prompt: list[int], completion: list[int], parent: int | None = None,
         parse_failure: bool = False) -> CallRecord:
    return CallRecord(index=index, parent=parent, prompt_ids=prompt, completion_ids=completion,
                      logprobs=[-float(t) / 100 for t in completion], parse_failure=parse_failure)


def test_parent_chain_merges_into_one_segment_with_masks_and_logprobs() -> None:
    calls = [call(0, [1, 2, 3], [10, 11]), call(1, [20, 21], [12], parent=0), call(2, [22], [13, 14], parent=1)]
    assembly = assemble(calls)
    assert assembly.num_breaks == 0
    [seg] = assembly.segments
    assert seg.prompt_ids == [1, 2, 3]
    assert seg.response_ids == [10, 11, 20, 21, 12, 22, 13, 14]
    assert seg.response_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert seg.response_logprobs == [-0.10, -0.11, 0.0, 0.0, -0.12, 0.0, -0.13, -0.14]
    assert seg.num_turns == 3 and seg.calls == [0, 1, 2]


def test_full_prompt_ids_rebuilds_the_chain() -> None:
    calls = [call(0, [1, 2], [3]), call(1, [4], [5], parent=0), call(2, [6, 7], [8], parent=1)]
    assert full_prompt_ids(calls, 2) == [1, 2, 3, 4, 5, 6, 7]


def test_full_prompts_that_extend_merge_by_tokens() -> None:
    # No parent links (e.g. re-rendered prompts): merging is decided on token ids alone.
    calls = [call(0, [1, 2], [3, 4]), call(1, [1, 2, 3, 4, 5], [6])]
    [seg] = assemble(calls).segments
    assert seg.response_ids == [3, 4, 5, 6]
    assert seg.response_mask == [1, 1, 0, 1]


def test_prefix_break_opens_a_segment_and_is_counted() -> None:
    calls = [call(0, [1, 2], [3]), call(1, [1, 9, 3, 4], [5]), call(2, [1, 9, 3, 4, 5, 6], [7])]
    assembly = assemble(calls)
    assert assembly.num_breaks == 1
    first, second = assembly.segments
    assert first.full_ids() == [1, 2, 3]
    assert second.prompt_ids == [1, 9, 3, 4]
    assert second.response_ids == [5, 6, 7] and second.response_mask == [1, 0, 1]


def test_retry_from_the_same_parent_does_not_corrupt_the_first_branch() -> None:
    calls = [call(0, [1], [2]), call(1, [3], [4], parent=0), call(2, [3], [5], parent=0)]
    assembly = assemble(calls)
    assert assembly.num_breaks == 1
    first, second = assembly.segments
    assert first.full_ids() == [1, 2, 3, 4]
    assert second.full_ids() == [1, 2, 3, 5]
    assert second.prompt_ids == [1, 2, 3] and second.response_mask == [1]


def test_interleaved_sub_agent_keeps_both_conversations_whole() -> None:
    calls = [call(0, [1, 2], [3]), call(1, [50, 51], [52]), call(2, [4], [5], parent=0),
             call(3, [53], [54], parent=1)]
    assembly = assemble(calls)
    assert [s.full_ids() for s in assembly.segments] == [[1, 2, 3, 4, 5], [50, 51, 52, 53, 54]]
    assert assembly.num_breaks == 1  # the second conversation is a second segment


def test_parse_failures_are_flagged_per_segment() -> None:
    calls = [call(0, [1], [2], parse_failure=True), call(1, [3], [4], parent=0)]
    [seg] = assemble(calls).segments
    assert seg.to_json()["flags"]["parse_failures"] == 1


def test_misaligned_logprobs_are_rejected() -> None:
    bad = CallRecord(index=0, parent=None, prompt_ids=[1], completion_ids=[2, 3], logprobs=[-0.1])
    with pytest.raises(ValueError, match="logprobs"):
        assemble([bad])
