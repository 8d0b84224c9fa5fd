"""Chat rendering: normalized history comparison and incremental encoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.proxy.render import ChatRenderer, normalize_message

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object",
                                                          "properties": {"cmd": {"type": "string"}}}}}]


def test_normalize_ignores_call_ids_whitespace_and_argument_formatting() -> None:
    a = {"role": "assistant", "content": " hi \n",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "bash", "arguments": '{"cmd": "ls", "n": 1}'}}]}
    b = {"role": "assistant", "content": [{"type": "text", "text": "hi"}],
         "tool_calls": [{"id": "other", "type": "function",
                         "function": {"name": "bash", "arguments": '{"n":1,"cmd":"ls"}'}}]}
    assert normalize_message(a) == normalize_message(b)
    c = {**b, "tool_calls": [{"function": {"name": "bash", "arguments": '{"cmd": "pwd", "n": 1}'}}]}
    assert normalize_message(a) != normalize_message(c)


@pytest.mark.parametrize("template_fixture", ["tiny_model_dir", "tiny_hermes_model_dir"])
def test_continuation_is_the_new_messages_with_the_separator(template_fixture: str,
                                                             request: pytest.FixtureRequest) -> None:
    model_dir: Path = request.getfixturevalue(template_fixture)
    renderer = ChatRenderer.from_path(str(model_dir))
    new = [{"role": "tool", "tool_call_id": "x", "content": "a.txt"}, {"role": "user", "content": "next"}]
    ids = renderer.encode_continuation(new, TOOLS, previous_ended_with_eos=True)
    assert ids is not None
    assert renderer.decode(ids) == ("\n<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n"
                                    "<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n")
    # A completion cut by length gets its end-of-turn token inserted (mask 0) before the separator.
    cut = renderer.encode_continuation(new, TOOLS, previous_ended_with_eos=False)
    assert cut == [renderer.eos_id] + ids


def test_continuation_tokens_match_a_full_render(tiny_model_dir: Path) -> None:
    """Prompt + template-rendered reply + continuation == rendering the whole conversation."""
    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list files"}]
    reply = {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]}
    tool = [{"role": "tool", "tool_call_id": "c", "content": "a.txt"}]
    prompt = renderer.encode_full(history, TOOLS)
    whole = renderer.encode_full(history + [reply] + tool, TOOLS)
    with_reply = renderer.encode_text(renderer.render_text(history + [reply], TOOLS, add_generation_prompt=False))
    reply_ids = with_reply[len(prompt):-1]  # drop the trailing "\n": it belongs to the next turn
    assert with_reply[:len(prompt)] == prompt and reply_ids[-1] == renderer.eos_id
    delta = renderer.encode_continuation(tool, TOOLS, previous_ended_with_eos=True)
    assert prompt + reply_ids + delta == whole


def test_piecewise_tokenization_equals_whole_text_encoding(tiny_model_dir: Path) -> None:
    import random

    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    pieces = renderer._pieces
    assert pieces is not None and pieces.enabled and "<|im_start|>" in pieces._ids
    whole = renderer.tokenizer.backend_tokenizer
    alphabet = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", " ", "\n", "  ",
                "a", "bc", "é", "日本", '{"x": 1}', "<", "|", ">", "<think>", "\t", "<|endoftext|>", "<|im_start",
                "im_end|>"]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert pieces.encode(text) == whole.encode(text, add_special_tokens=False).ids, text
    assert pieces.enabled
    # The shared part of every prompt is encoded once, then served from the cache.
    system = "<|im_start|>system\n" + "You are a careful coding agent. " * 200 + "<|im_end|>\n"
    pieces.encode(system + "<|im_start|>user\nfirst<|im_end|>")
    cached = len(pieces._cache)
    pieces.encode(system + "<|im_start|>user\nsecond<|im_end|>")
    assert len(pieces._cache) == cached + 1  # only the new user text


def test_piecewise_tokenization_turns_itself_off_when_it_disagrees(tiny_model_dir: Path) -> None:
    from rlkit.proxy.render import SegmentEncoder

    real = ChatRenderer.from_path(str(tiny_model_dir)).tokenizer.backend_tokenizer

    class Merging:  # a tokenizer stand-in whose ids depend on what surrounds an added token
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def encode(self, text: str, add_special_tokens: bool = False) -> object:
            encoding = real.encode(text, add_special_tokens=add_special_tokens)
            return type("E", (), {"ids": [*encoding.ids, len(text)]})()

    pieces = SegmentEncoder(Merging())
    text = "a<|im_end|>b"
    assert pieces.encode(text) == real.encode(text, add_special_tokens=False).ids + [len(text)]
    assert not pieces.enabled


def test_history_is_normalized_once_per_session() -> None:
    from rlkit.proxy.session import Session

    session = Session("s")
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": " task "}]
    first = session.normalize(history)
    assert first == tuple(normalize_message(m) for m in history)
    resent = [dict(m) for m in history] + [{"role": "assistant", "content": "ok"}]
    second = session.normalize(resent)
    assert second[0] is first[0] and second[1] is first[1]  # reused, not normalized again
    edited = [{"role": "system", "content": "changed"}, *resent[1:]]
    third = session.normalize(edited)
    assert third == tuple(normalize_message(m) for m in edited) and third[0] != first[0]


def test_tool_list_is_serialized_once_per_session() -> None:
    from rlkit.proxy.render import tools_key
    from rlkit.proxy.session import Session

    session = Session("s")
    first = session.tools_key(TOOLS)
    assert first == tools_key(TOOLS)
    resent = [dict(t) for t in TOOLS]
    assert session.tools_key(resent) is first  # equal list: no new serialization
    other = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "sh"}}]
    assert session.tools_key(other) == tools_key(other) != first
    assert session.tools_key(None) == tools_key(None)


def test_vllms_completion_text_is_used_only_after_it_matched_the_decode(tiny_model_dir: Path) -> None:
    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    ids = renderer.encode_text("I will look.\n<tool_call>\n<function=bash>\n</function>\n</tool_call>")
    mine = renderer.decode(ids)
    renderer.text_checks_left = 2
    assert renderer.completion_text(ids, None) == mine  # no text from vLLM: decoded here, no check spent
    assert renderer.text_checks_left == 2
    assert renderer.completion_text(ids, mine) == mine
    assert renderer.completion_text(ids, mine) == mine
    # Checked twice and equal: from now on vLLM's text is taken as it comes, without decoding.
    assert renderer.completion_text(ids, "vLLM's own text") == "vLLM's own text"
    assert renderer.upstream_text_ok


def test_vllms_completion_text_is_dropped_for_good_when_it_differs(tiny_model_dir: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    renderer = ChatRenderer.from_path(str(tiny_model_dir))
    ids = renderer.encode_text("<tool_call>\nls\n</tool_call>")
    mine = renderer.decode(ids)
    assert renderer.completion_text(ids, mine.replace("<tool_call>", "")) == mine  # special tokens skipped
    assert not renderer.upstream_text_ok and "differs" in caplog.text
    renderer.text_checks_left = 0
    assert renderer.completion_text(ids, "anything") == mine
