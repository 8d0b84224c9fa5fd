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
