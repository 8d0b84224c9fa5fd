"""The light path to a model's tokenizer and verl's parsers: the model's own chat template and
tokenizer.json, without importing transformers or running verl's package `__init__`.

Used by the parser probe (preflight) and by the proxy (`ChatRenderer.from_path`).

Why: on a 2-core machine `from transformers import AutoTokenizer` costs ~5.7 s of CPU (transformers 5
imports torch on the way) and `import verl` ~6 s (torch, tensordict, ray), against ~0.1 s for jinja2 +
tokenizers and ~0.2 s for verl's tool_parser module and what it imports (pydantic, regex). The probe
runs in preflight's first (cold) `rlkit check` (`bench/preflight.py`); the proxy starts with every
run, eval and inference (`bench/proxy_start.py`: `rlkit proxy serve` until it listens). The full path
is `python -m rlkit.proxy.parsers --full`.

What stays real:
- The parsers are verl's classes, from verl's own `tool_parser` module: only the package
  `__init__` files above it are skipped (they import the trainer), and `ray`, which
  `verl.utils.ray_utils` imports (~0.5 s of CPU) but the parsers never touch, is imported
  for real on first use only.
- The text is rendered the way transformers' `apply_chat_template` renders it (jinja2's
  immutable sandbox, trim_blocks/lstrip_blocks, loopcontrols, its `tojson`,
  `raise_exception` and `strftime_now`, the `{% generation %}` tag, the named special tokens
  as variables) and tokenized by the `tokenizers` library from the model's tokenizer.json,
  which is what transformers' fast tokenizer wraps.

Where transformers could load the model's tokenizer differently (no tokenizer.json, not
byte-level BPE, custom tokenizer code, legacy special-token files, another chat template, a
tokenizer class of the model's own that may default a special token the config leaves out)
`light_tokenizer` raises NeedsTransformers and the caller takes transformers' tokenizer.
tests/proxy/test_light_probe.py shows both paths give the same verdict for every verl parser;
tests/proxy/test_light_render.py that the proxy renders, encodes and decodes the same ids and text.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import types
from datetime import datetime
from pathlib import Path
from typing import Any

from rlkit.config.files import FileReadError, read_json, read_text

# The verl packages whose __init__ imports the trainer (torch, ray, tensordict): stood in by
# bare package modules over the same directories, so their submodules load from verl's files.
_VERL_PACKAGES = ("verl", "verl.experimental", "verl.experimental.agent_loop", "verl.utils")
TOOL_PARSER_MODULE = "verl.experimental.agent_loop.tool_parser"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _verl_plugins_configured() -> bool:
    """verl's __init__ loads plugins (which may register more parsers); with any, import verl whole."""
    if os.environ.get("VERL_USE_EXTERNAL_MODULES") or os.environ.get("VERL_USE_MODELSCOPE", "").lower() == "true":
        return True
    if os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower() == "none":
        return False
    from importlib.metadata import entry_points

    return bool(entry_points(group="verl.plugins"))


def _bare_package(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    module.__package__ = name
    sys.modules[name] = module


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module until one of its attributes is used, then imports it for real.

    Not importlib.util.LazyLoader: on Python 3.12 the `import` statement itself reads the
    module's `__spec__`, which makes LazyLoader load it at once."""

    def __getattr__(self, attr: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _imported_on_use(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return  # not installed: the real import fails with its own message
    module = _ImportedOnUse(name)
    module.__spec__ = spec
    sys.modules[name] = module


def load_verl_tool_parsers() -> types.ModuleType:
    """verl's tool_parser module; light when verl is not imported yet and no verl plugin is set up."""
    if "verl" in sys.modules or _verl_plugins_configured():
        return importlib.import_module(TOOL_PARSER_MODULE)
    try:
        for name in _VERL_PACKAGES:
            _bare_package(name)
        _imported_on_use("ray")
        return importlib.import_module(TOOL_PARSER_MODULE)
    except BaseException:  # leave the process as it was: a later `import verl` runs for real
        for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
            del sys.modules[name]
        if isinstance(sys.modules.get("ray"), _ImportedOnUse):
            del sys.modules["ray"]
        raise


def _read_json(path: Path) -> dict | None:
    try:
        data = read_json(path)
    except FileReadError:
        return None  # transformers' tokenizer then names the error
    return data if isinstance(data, dict) else None


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _compile(template: str) -> Any:
    """The chat template compiled as transformers compiles it (utils/chat_template_utils.py)."""
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers tracks it for masks)."""

        tags = {"generation"}  # noqa: RUF012 -- jinja2's Extension API

        def parse(self, parser: Any) -> jinja2.nodes.CallBlock:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: object, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


class TemplateTokenizer:
    """What the probe, the proxy's renderer and verl's parsers use of a transformers fast tokenizer:
    apply_chat_template (text only), encode, decode, convert_tokens_to_ids, the named special tokens
    and the Rust tokenizer underneath (`backend_tokenizer`)."""

    clean_up_tokenization_spaces = False  # light_tokenizer refuses a config that turns it on

    def __init__(self, backend: Any, chat_template: str, special: dict[str, str]) -> None:
        self._backend = backend
        self._template = _compile(chat_template)
        self.special_tokens_map = special
        for name in SPECIAL_TOKENS:
            setattr(self, name, special.get(name))

    def apply_chat_template(self, conversation: list[dict], tools: list[dict] | None = None, *,
                            tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        if tokenize:
            raise NotImplementedError("the light tokenizer renders text only")
        return self._template.render(messages=conversation, tools=tools, documents=None,
                                     add_generation_prompt=add_generation_prompt, **self.special_tokens_map)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if add_special_tokens:  # transformers may rebuild the post-processor that adds them
            raise NotImplementedError("the light tokenizer encodes without added special tokens only")
        return self._backend.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: int | list[int], skip_special_tokens: bool = False, **_: object) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    @property
    def backend_tokenizer(self) -> Any:
        return self._backend

    @property
    def unk_token_id(self) -> int | None:
        return None if self.unk_token is None else self._backend.token_to_id(self.unk_token)

    @property
    def eos_token_id(self) -> int | None:
        return None if self.eos_token is None else self._backend.token_to_id(self.eos_token)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        def one(token: str) -> int | None:
            index = self._backend.token_to_id(token)
            return self.unk_token_id if index is None else index

        return one(tokens) if isinstance(tokens, str) else [one(t) for t in tokens]


GENERIC_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")  # built from tokenizer.json as is
DEFAULTED_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token")  # a model's tokenizer class may default these
OWN_FILES = ("special_tokens_map.json", "added_tokens.json", "chat_template.json", "additional_chat_templates")


def _template(path: Path, config: dict) -> str | None:
    """The one chat template transformers would use with tools; None if it could pick another."""
    in_config = config.get("chat_template")
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        try:
            text = read_text(jinja)
        except FileReadError:
            return None
        return text if in_config is None or in_config == text else None
    return in_config if isinstance(in_config, str) else None


def _refusal(path: Path, config: dict | None) -> str | None:
    """Why transformers might load this tokenizer differently from tokenizer.json + the config; None if it cannot."""
    if config is None:
        return "no readable tokenizer_config.json object"
    if not (path / "tokenizer.json").is_file():
        return "no tokenizer.json"
    if found := [n for n in OWN_FILES if (path / n).exists()]:
        return f"{found[0]} present"
    if config.get("auto_map"):
        return "custom tokenizer code (auto_map)"
    if config.get("clean_up_tokenization_spaces") or isinstance(config.get("extra_special_tokens"), dict):
        return "clean_up_tokenization_spaces or named extra special tokens"
    if config.get("tokenizer_class") not in GENERIC_CLASSES and not all(k in config for k in DEFAULTED_TOKENS):
        return f"{config.get('tokenizer_class')} may default {', '.join(k for k in DEFAULTED_TOKENS if k not in config)}"
    return None


class NeedsTransformers(Exception):
    """This model's tokenizer is one only transformers loads faithfully; the message says why."""


def _same_ids(backend: Any, added: object) -> bool:
    if not isinstance(added, dict):
        return False
    try:
        return all(isinstance(t, dict) and backend.token_to_id(str(t.get("content"))) == int(i)
                   for i, t in added.items())
    except ValueError:
        return False


def light_tokenizer(model_dir: str | Path, *, same_ids: bool = False) -> TemplateTokenizer:
    """A TemplateTokenizer for the model. NeedsTransformers unless decoding is byte-level BPE (any
    tokenizer class transformers picks then decodes the same text), the config's added tokens have
    tokenizer.json's ids, and every named special token comes from the config (a model's own
    class may default the ones it leaves out). `same_ids` (the proxy, which records the ids): also
    unless transformers reads tokenizer.json as is; a model's own class (Qwen2Tokenizer) builds its
    own pre-tokenizer, which the parser probe's verdict does not depend on but a prompt's ids may."""
    path = Path(model_dir)
    config = _read_json(path / "tokenizer_config.json")
    if (reason := _refusal(path, config)) is not None:
        raise NeedsTransformers(reason)
    assert config is not None
    if same_ids and config.get("tokenizer_class") not in GENERIC_CLASSES:
        raise NeedsTransformers(f"{config.get('tokenizer_class')} builds its own pre-tokenizer")
    template = _template(path, config)
    if template is None:
        raise NeedsTransformers("transformers may pick another chat template")
    special = {name: _token_text(config[name]) for name in SPECIAL_TOKENS if config.get(name) is not None}
    if None in special.values():
        raise NeedsTransformers("a special token is neither a string nor an AddedToken object")
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 -- tokenizers raises bare Exception; transformers may still convert it
        raise NeedsTransformers(f"tokenizers cannot read tokenizer.json: {exc}") from None
    if type(backend.model).__name__ != "BPE" or type(backend.decoder).__name__ != "ByteLevel":
        raise NeedsTransformers("not a byte-level BPE tokenizer")
    if not _same_ids(backend, config.get("added_tokens_decoder") or {}):
        raise NeedsTransformers("tokenizer_config.json adds tokens tokenizer.json lacks")
    return TemplateTokenizer(backend, template, special)  # type: ignore[arg-type]
