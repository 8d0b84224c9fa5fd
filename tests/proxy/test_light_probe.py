"""The parser probe's light path (jinja2 + tokenizers, verl's parser module without verl's package
imports) gives the verdict of the full path (transformers' AutoTokenizer, `import verl`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.proxy._light_tokenizer import NeedsTransformers, light_tokenizer

REPO = Path(__file__).resolve().parents[2]
NO_TOOL_CALLS = ("{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\\n' + (message.content or '')"
                 " + '<|im_end|>\\n' -}}{%- endfor -%}"
                 "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


def model_copy(src: Path, dst: Path, template: str | None = None, **config: object) -> Path:
    """The model's tokenizer and config files (no weights), with another template or tokenizer_config keys."""
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
    if template is not None:
        (dst / "chat_template.jinja").write_text(template)
    if config:
        tok_config = json.loads((dst / "tokenizer_config.json").read_text())
        (dst / "tokenizer_config.json").write_text(json.dumps({**tok_config, **config}))
    return dst


@pytest.fixture(scope="module")
def no_tool_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    return model_copy(tiny_model_dir, tmp_path_factory.mktemp("no-tools") / "model", NO_TOOL_CALLS)


@pytest.fixture(scope="module")
def own_class_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """Named as Qwen3 checkpoints name their tokenizer: transformers then builds Qwen2Tokenizer (its own
    pre-tokenizer and defaults) instead of reading tokenizer.json as is; every defaulted token is set."""
    return model_copy(tiny_model_dir, tmp_path_factory.mktemp("own-class") / "model", tokenizer_class="Qwen2Tokenizer",
                      bos_token=None, unk_token=None)


def verl_parser_names() -> list[str]:
    from verl.experimental.agent_loop.tool_parser import ToolParser

    return sorted(ToolParser._registry)


def run_probe(args: list[str]) -> tuple[list[dict], str]:
    proc = subprocess.run([sys.executable, "-m", "rlkit.proxy.parsers", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_light_and_full_probe_give_the_same_verdict_for_every_verl_parser(
        tiny_model_dir: Path, tiny_hermes_model_dir: Path, no_tool_model_dir: Path, own_class_model_dir: Path) -> None:
    parsers = verl_parser_names()
    assert {"hermes", "qwen3_coder"} <= set(parsers)
    models = (tiny_model_dir, tiny_hermes_model_dir, no_tool_model_dir, own_class_model_dir)
    pairs = [a for m in models for p in parsers
             for a in (str(m), p)]
    light, light_err = run_probe(pairs)
    full, _ = run_probe(["--full", *pairs])
    assert "transformers' tokenizer" not in light_err  # every pair took the light path
    assert light == full
    by_model = {m: {v["parser"]: v for v in light[i * len(parsers):(i + 1) * len(parsers)]}
                for i, m in enumerate(("coder", "hermes", "none", "own-class"))}
    assert by_model["coder"]["qwen3_coder"]["ok"] and by_model["coder"]["hermes"]["parses"] == ["qwen3_coder"]
    assert by_model["hermes"]["hermes"]["ok"] and not by_model["hermes"]["qwen3_coder"]["ok"]
    assert "hermes" in by_model["hermes"]["qwen3_coder"]["parses"]
    assert all(v["detail"] == "the chat template does not render assistant tool calls" and not v["parses"]
               for v in by_model["none"].values())
    assert by_model["own-class"] == by_model["coder"]


def test_light_probe_runs_verl_parsers_without_transformers_torch_or_ray(tiny_model_dir: Path) -> None:
    script = f"""
import asyncio, json, sys
from rlkit.proxy._light_tokenizer import load_verl_tool_parsers
module = load_verl_tool_parsers()
from rlkit.proxy.parsers import probe
verdict = asyncio.run(probe({str(tiny_model_dir)!r}, "qwen3_coder"))
print(json.dumps({{"ok": verdict["ok"], "file": module.__file__, "parsers": sorted(module.ToolParser._registry),
    "verl_init_ran": hasattr(sys.modules["verl"], "__version__"),
    "loaded": sorted(m for m in ("torch", "transformers", "tensordict", "numpy") if m in sys.modules),
    "ray": type(sys.modules["ray"]).__name__}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=True)
    seen = json.loads(proc.stdout)
    import importlib.util

    verl_dir = Path(importlib.util.find_spec("verl").submodule_search_locations[0])  # type: ignore[union-attr]
    assert seen["ok"] and Path(seen["file"]) == verl_dir / "experimental" / "agent_loop" / "tool_parser.py"
    assert seen["parsers"] == verl_parser_names()
    assert not seen["verl_init_ran"] and seen["loaded"] == [] and seen["ray"] == "_ImportedOnUse"


CONVERSATIONS = [
    ([{"role": "user", "content": "List /tmp."}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo ✓"}], True),
    ([{"role": "user", "content": "List /tmp."},
      {"role": "assistant", "content": "Sure.", "tool_calls": [
          {"type": "function", "id": "c0", "function": {"name": "run_shell", "arguments": {"command": "ls"}}}]},
      {"role": "tool", "content": "a\nb", "tool_call_id": "c0"}], False),
]


@pytest.mark.parametrize("which", ["coder", "hermes", "generation"])
def test_template_tokenizer_renders_and_tokenizes_as_transformers(which: str, tiny_model_dir: Path,
                                                                  tiny_hermes_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rlkit.proxy.parsers import PROBE_TOOL

    model = {"coder": tiny_model_dir, "hermes": tiny_hermes_model_dir}.get(which)
    if model is None:  # transformers' {% generation %} tag (assistant masks) renders its body
        template = ("{% generation %}{{ bos_token }}{% endgeneration %}"
                    + (tiny_model_dir / "chat_template.jinja").read_text())
        model = model_copy(tiny_model_dir, tmp_path / "gen", template, bos_token="<|im_start|>")
    real, light = AutoTokenizer.from_pretrained(str(model)), light_tokenizer(model)
    for messages, gen in CONVERSATIONS:
        for tools in (None, [PROBE_TOOL]):
            text = real.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
            assert light.apply_chat_template(messages, tools=tools, add_generation_prompt=gen) == text
            ids = real.encode(text, add_special_tokens=False)
            assert light.encode(text, add_special_tokens=False) == ids
            assert light.decode(ids) == real.decode(ids) and light.decode(ids, skip_special_tokens=True) == \
                real.decode(ids, skip_special_tokens=True)
    assert light.special_tokens_map == real.special_tokens_map
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(light, name) == getattr(real, name), name
    tokens = ["<|im_end|>", "<tool_call>", "<tool_call|>", "not-a-token-here"]
    assert light.convert_tokens_to_ids(tokens) == real.convert_tokens_to_ids(tokens)


@pytest.mark.parametrize(("change", "reason"), [
    ({"files": {"special_tokens_map.json": "{}"}}, "special_tokens_map.json present"),
    ({"config": {"tokenizer_class": "Qwen2Tokenizer"}}, "Qwen2Tokenizer may default bos_token, unk_token"),
    ({"config": {"auto_map": {"AutoTokenizer": ["x.Tok", None]}}}, "auto_map"),
    ({"config": {"added_tokens_decoder": {"5": {"content": "<|im_end|>"}}}}, "adds tokens tokenizer.json lacks"),
    ({"config": {"chat_template": "{{ messages }}"}}, "another chat template"),
    ({"drop": "tokenizer.json"}, "no tokenizer.json"),
])
def test_models_transformers_may_load_differently_take_the_full_path(change: dict, reason: str, tiny_model_dir: Path,
                                                                      tmp_path: Path) -> None:
    model = model_copy(tiny_model_dir, tmp_path / "m", **change.get("config", {}))
    for name, text in change.get("files", {}).items():
        (model / name).write_text(text)
    if "drop" in change:
        (model / change["drop"]).unlink()
    with pytest.raises(NeedsTransformers, match=reason):
        light_tokenizer(model)


def test_model_class_with_every_defaulted_token_set_takes_the_light_path(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A model's own tokenizer class (Qwen3 checkpoints name Qwen2Tokenizer) cannot default a token the config sets."""
    model = model_copy(tiny_model_dir, tmp_path / "m", tokenizer_class="Qwen2Tokenizer", bos_token=None,
                       unk_token=None)
    light = light_tokenizer(model)
    assert light.pad_token == "<|endoftext|>" and light.unk_token is None and light.bos_token is None


def test_the_proxy_process_loads_verls_parsers_without_verls_package_imports(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`rlkit proxy serve` (a run's proxy when no verl plugin is set) skips verl's `__init__` (~1.2 s of CPU of
    every start): verl's tool_parser module loads alone, and its parsers still read the template's tool calls
    (the start-up check parses one; --strict-parser-check exits if it does not). Its tokenizer is the light one
    (tokenizers + jinja2): transformers, which imports torch (~7 s of CPU), is never imported."""
    import os
    import signal

    argv = [sys.executable, "-X", "importtime", "-X", "faulthandler", "-m", "rlkit.cli.main", "proxy", "serve", "--model-path",
            str(tiny_model_dir), "--host", "127.0.0.1", "--port", "0", "--upstream", "http://127.0.0.1:9",
            "--tool-call-parser", "qwen3_coder", "--strict-parser-check", "--no-anthropic-warm-up"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    log = tmp_path / "stderr.txt"  # -X importtime writes more than a pipe holds
    with log.open("w") as stderr:
        # A shell's background job ignores SIGINT, and Python keeps an ignored SIGINT ignored: the child
        # gets the default back, as a proxy started from a terminal has it.
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - one signal() call
        try:
            ready = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:  # where it hangs: faulthandler prints every thread's stack on SIGABRT
                proc.send_signal(signal.SIGABRT)
                proc.wait(30)
                stacks = [line for line in log.read_text().splitlines() if not line.startswith("import time:")]
                pytest.fail("the proxy ignored SIGINT for 60 s after its ready line:\n" + "\n".join(stacks[-80:]))
    err = log.read_text()
    assert ready.startswith("rlkit proxy on http://127.0.0.1:"), ready + err[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert "verl.tools.schemas" in imported  # what verl's tool_parser module imports
    assert not {"verl.protocol", "verl.experimental.agent_loop.agent_loop", "tensordict"} & imported
    assert "tokenizers" in imported and not {"transformers", "torch", "ray", "litellm"} & imported
    assert "does not match the chat template" not in err
