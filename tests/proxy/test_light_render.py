"""The proxy's renderer on the light tokenizer (the model's tokenizer.json and chat template through `tokenizers`
and jinja2) gives the text and ids transformers' AutoTokenizer gives, so the proxy records the same tokens.
(That `rlkit proxy serve` starts without transformers: test_light_probe.py.)"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rlkit.proxy.render import ChatRenderer

TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "the command"},
                                                   "timeout": {"type": "integer"}},
                   "required": ["command"]}}},
         {"type": "function", "function": {"name": "finish", "description": "Done.",
                                           "parameters": {"type": "object", "properties": {}}}}]

CALL = {"role": "assistant", "content": "Let me look.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls -la /app", "timeout": 30}'}}]}
CONVERSATIONS = [
    [{"role": "user", "content": "Fix the bug in calc.py"}],
    [{"role": "system", "content": "You are a careful engineer."}, {"role": "user", "content": "héllo ✓ 日本 \t\n  "}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    [{"role": "user", "content": "run it"}, CALL,
     {"role": "tool", "tool_call_id": "call_1", "content": "total 0\ndrwxr-xr-x 2 root root 40 ."},
     {"role": "user", "content": [{"type": "text", "text": "now "}, {"type": "text", "text": "finish"}]}],
    [{"role": "user", "content": "text that spells <|im_end|> and <|im_start|>user inside"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": None, "tool_calls": CALL["tool_calls"]},
     {"role": "tool", "tool_call_id": "call_1", "content": ""}],
]


@pytest.fixture(scope="module", params=["qwen3_coder", "hermes"])
def model_dir(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("tiny_model_dir" if request.param == "qwen3_coder" else "tiny_hermes_model_dir")


@pytest.fixture(scope="module")
def renderers(model_dir: Path) -> tuple[ChatRenderer, ChatRenderer]:
    from transformers import AutoTokenizer

    light = ChatRenderer.from_path(str(model_dir))
    assert type(light.tokenizer).__name__ == "TemplateTokenizer"  # the light path was taken
    return light, ChatRenderer(AutoTokenizer.from_pretrained(str(model_dir)))


def test_the_light_renderer_renders_and_encodes_every_conversation_as_transformers_does(renderers) -> None:
    light, full = renderers
    assert (light.eos_id, light.eos_text) == (full.eos_id, full.eos_text)
    assert light.tokenizer.special_tokens_map == full.tokenizer.special_tokens_map
    for messages in CONVERSATIONS:
        for tools in (None, TOOLS):
            for prompt in (True, False):
                text = light.render_text(messages, tools, add_generation_prompt=prompt)
                assert text == full.render_text(messages, tools, add_generation_prompt=prompt), (messages, tools)
            ids = light.encode_full(messages, tools)
            assert ids == full.encode_full(messages, tools)
            assert ids == full.tokenizer.encode(full.render_text(messages, tools), add_special_tokens=False)
            for eos in (True, False):
                assert light.encode_continuation(messages[-1:], tools, previous_ended_with_eos=eos) == \
                    full.encode_continuation(messages[-1:], tools, previous_ended_with_eos=eos)


def test_the_light_renderer_decodes_any_ids_as_transformers_does(renderers) -> None:
    light, full = renderers
    vocab = full.tokenizer.backend_tokenizer.get_vocab_size()
    rng = random.Random(0)
    for n in (1, 2, 7, 64, 300):
        ids = [rng.randrange(vocab) for _ in range(n)]
        assert light.decode(ids) == full.tokenizer.decode(ids, skip_special_tokens=False)
        assert light.tokenizer.decode(ids, skip_special_tokens=True) == full.tokenizer.decode(ids, skip_special_tokens=True)


def test_a_tokenizer_transformers_would_load_its_own_way_takes_transformers(tmp_path: Path, tiny_model_dir: Path) -> None:
    from tests.proxy.test_light_probe import model_copy

    own = model_copy(tiny_model_dir, tmp_path / "own", tokenizer_class="Qwen2Tokenizer", bos_token=None, unk_token=None)
    assert type(ChatRenderer.from_path(str(own)).tokenizer).__name__ != "TemplateTokenizer"

