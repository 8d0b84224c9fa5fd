"""Chat template rendering and incremental tokenization.

The proxy renders conversations itself (token in, token out). For a conversation that
continues a chain the proxy already served, only the new messages are encoded: they
are rendered after a fixed two-message anchor and sliced off, so cost does not grow
with history and the sampled tokens of earlier turns are reused verbatim.

Messages are compared in a normalized form: tool-call ids dropped, arguments compared
as parsed JSON, text content joined and stripped. Agents echo history back with small
cosmetic changes; the normalized form ignores those and nothing else.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import orjson

log = logging.getLogger("rlkit.proxy")

_ANCHOR = [{"role": "user", "content": "."}, {"role": "assistant", "content": "."}]
# Used once per tool set to learn whether the template renders new turns the same without tools.
_PROBE = [{"role": "tool", "tool_call_id": "p", "content": "probe"}, {"role": "user", "content": "probe"}]


def content_text(content: Any) -> str:
    """OpenAI content (str, None or list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in ("text", "input_text", "output_text", None) and "text" in part:
                    parts.append(str(part["text"]))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def _arguments_obj(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return arguments if arguments is not None else {}


def normalize_message(message: dict[str, Any]) -> tuple:
    """Hashable, comparison-only form of one OpenAI chat message."""
    role = message.get("role", "")
    text = content_text(message.get("content")).strip()
    calls = ()
    if message.get("tool_calls"):
        calls = tuple(
            (fn.get("name", ""), orjson.dumps(_arguments_obj(fn.get("arguments")),
                                              option=orjson.OPT_SORT_KEYS).decode())
            for fn in ((tc.get("function") or tc) for tc in message["tool_calls"])
        )
    return (role, text, calls)


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """The message as chat templates expect it: text content, arguments as a mapping."""
    out: dict[str, Any] = {"role": message.get("role", "user"), "content": content_text(message.get("content"))}
    if message.get("tool_calls"):
        calls = []
        for tc in message["tool_calls"]:
            fn = tc.get("function") or tc
            args = _arguments_obj(fn.get("arguments"))
            calls.append({"type": "function", "id": tc.get("id"),
                          "function": {"name": fn.get("name", ""), "arguments": args}})
        out["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        if key in message:
            out[key] = message[key]
    return out


def tools_key(tools: list[dict[str, Any]] | None) -> bytes:
    return orjson.dumps(tools or [], option=orjson.OPT_SORT_KEYS)


class SegmentEncoder:
    """Encodes text piece by piece between the tokenizer's added tokens, caching the pieces.

    A HF tokenizer splits text at its added tokens before normalizing or pre-tokenizing,
    so the ids of a text are the ids of its pieces in order. The prompts of a rollout share
    long pieces (system prompt, tool list, template boilerplate): those are encoded once.
    The first CHECKS texts are also encoded whole and compared; any difference turns the
    piece path off for good.
    """

    CHECKS = 32
    MAX_PIECES = 16384
    MAX_CHARS = 64 << 20

    def __init__(self, fast: Any) -> None:
        self._fast = fast
        self._ids: dict[str, int] = {}
        normalizer = getattr(fast, "normalizer", None)
        for token_id, token in fast.get_added_tokens_decoder().items():
            if token.lstrip or token.rstrip or token.single_word:
                continue  # it takes whitespace from beside it: not a clean boundary
            if token.normalized and normalizer is not None:
                continue  # matched after normalization, which may move it
            self._ids[token.content] = token_id
        self._split = (re.compile("(" + "|".join(re.escape(t) for t in sorted(self._ids, key=len, reverse=True))
                                  + ")").split if self._ids else None)
        self._cache: dict[str, list[int]] = {}
        self._chars = 0
        self.checks_left = self.CHECKS
        self.enabled = self._split is not None

    def _piece(self, piece: str) -> list[int]:
        ids = self._cache.get(piece)
        if ids is None:
            ids = self._fast.encode(piece, add_special_tokens=False).ids
            cache = self._cache
            cache[piece] = ids
            self._chars += len(piece)
            while len(cache) > self.MAX_PIECES or self._chars > self.MAX_CHARS:
                oldest = next(iter(cache))
                self._chars -= len(oldest)
                del cache[oldest]
        return ids

    def encode(self, text: str) -> list[int]:
        if not self.enabled:
            return self._fast.encode(text, add_special_tokens=False).ids
        out: list[int] = []
        special = self._ids
        for i, piece in enumerate(self._split(text)):
            if i % 2:
                out.append(special[piece])
            elif piece:
                out.extend(self._piece(piece))
        if self.checks_left:
            self.checks_left -= 1
            whole = self._fast.encode(text, add_special_tokens=False).ids
            if whole != out:
                self.enabled = False
                self._cache.clear()
                log.warning("piecewise tokenization differs from whole-text tokenization; using whole-text only")
                return whole
        return out


class ChatRenderer:
    """Renders OpenAI-format messages with a HF tokenizer's chat template."""

    # vLLM's own text of a completion is used once it matched this tokenizer's decode this many times.
    TEXT_CHECKS = 32

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_id: int = tokenizer.eos_token_id
        self.eos_text: str = tokenizer.eos_token
        self._anchor_prefix: dict[bytes, str] = {}
        self._tools_matter: dict[bytes, bool] = {}
        # The Rust tokenizer directly: the python wrapper costs more than the encoding itself.
        self._fast = getattr(tokenizer, "backend_tokenizer", None)
        self._pieces = SegmentEncoder(self._fast) if self._fast is not None else None
        # transformers' decode only adds work on top of the Rust one when it cleans up spaces.
        self._fast_decode = self._fast is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False)
        self.text_checks_left = self.TEXT_CHECKS
        self.upstream_text_ok = True

    @classmethod
    def from_path(cls, model_path: str) -> ChatRenderer:
        """The model's template and tokenizer.json through jinja2 + `tokenizers` where transformers would
        load them as is (`_light_tokenizer`: ~0.3 s of CPU instead of ~6 s, transformers importing torch),
        else transformers' AutoTokenizer."""
        from rlkit.proxy._light_tokenizer import NeedsTransformers, light_tokenizer

        try:
            light = light_tokenizer(model_path, same_ids=True)
            if light.eos_token_id is None:
                raise NeedsTransformers("no end-of-sequence token in tokenizer.json")
            log.info("tokenizer of %s: its tokenizer.json and chat template (tokenizers + jinja2)", model_path)
            return cls(light)
        except NeedsTransformers as exc:
            log.info("tokenizer of %s: transformers' AutoTokenizer (%s)", model_path, exc)
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(model_path))

    def render_text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    *, add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            [template_message(m) for m in messages], tools=tools or None, tokenize=False,
            add_generation_prompt=add_generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        if self._pieces is not None:
            return self._pieces.encode(text)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_full(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode_text(self.render_text(messages, tools))

    def encode_continuation(self, new_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                            *, previous_ended_with_eos: bool, key: bytes | None = None) -> list[int] | None:
        """Ids of `new_messages` (plus the generation prompt) following an assistant turn.

        The turn separator after the end-of-turn token belongs to the new messages. If
        the previous completion did not end with the end-of-turn token (cut by length),
        the token is inserted here. Returns None if the template is not prefix-stable.
        `key` is `tools_key(tools)` where the caller has it (a large tool list costs to serialize).
        """
        if key is None:
            key = tools_key(tools)
        if tools and key not in self._tools_matter:
            # Rendering a large tool list on every turn dominates the cost; skip it when the
            # template renders new turns identically without it (checked once per tool set).
            self._tools_matter[key] = self._continuation_text(_PROBE, tools, key) != \
                self._continuation_text(_PROBE, None, b"[]")
        if tools and not self._tools_matter[key]:
            tools, key = None, b"[]"
        text = self._continuation_text(new_messages, tools, key)
        if text is None:
            return None
        return self.encode_text(text if previous_ended_with_eos else self.eos_text + text)

    def _continuation_text(self, new_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                           key: bytes) -> str | None:
        """Rendered text of `new_messages` after an assistant turn, from just past its end-of-turn token."""
        prefix = self._anchor_prefix.get(key)
        if prefix is None:
            prefix = self.render_text(_ANCHOR, tools, add_generation_prompt=False)
            self._anchor_prefix[key] = prefix
        full = self.render_text(_ANCHOR + new_messages, tools)
        cut = prefix.rfind(self.eos_text)
        if cut < 0 or not full.startswith(prefix):
            return None
        return full[cut + len(self.eos_text):]

    def decode(self, ids: list[int]) -> str:
        if self._fast_decode:
            return self._fast.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def completion_text(self, ids: list[int], upstream_text: str | None, *, ended_with_eos: bool = False) -> str:
        """Text of completion `ids` (special tokens kept): vLLM's, which came with them, once it proved equal.

        `ids` exclude the end-of-turn token when the completion `ended_with_eos`; vLLM's text
        may still carry it. The first TEXT_CHECKS texts are also decoded here and compared;
        any difference turns vLLM's text off for good. Decoding is cheap back to back but
        costs ~100 us on a CPU that idled through the generation, as every call's CPU has.
        """
        if not upstream_text or not self.upstream_text_ok:
            return self.decode(ids)
        if ended_with_eos and upstream_text.endswith(self.eos_text):
            upstream_text = upstream_text[:-len(self.eos_text)]
        if self.text_checks_left:
            self.text_checks_left -= 1
            mine = self.decode(ids)
            if mine != upstream_text:
                self.upstream_text_ok = False
                log.warning("vLLM's completion text differs from this tokenizer's decode; decoding here from now on")
            return mine
        return upstream_text
