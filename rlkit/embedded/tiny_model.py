"""Builds the embedded default policy: a tiny random-init Qwen3 model with its own
BPE tokenizer and a Qwen3-Coder style chat template.

Model hubs are unreachable, so everything is made here from scratch. The model is
untied (separate lm_head) so in-place weight reloads on vLLM-CPU need no fix-up.
Building is deterministic for a given Python stdlib, and cached: a directory whose
`rlkit_tiny.json` matches the recipe is left alone.

Needs torch, transformers and tokenizers (the main venv). Run it with
`rlkit model tiny OUT_DIR [--template qwen3_coder|hermes]`.
"""

from __future__ import annotations

import json
import sysconfig
from importlib import resources
from pathlib import Path

RECIPE_VERSION = 1
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added (not special): they must survive decoding so tool parsers can see them.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
TEMPLATES = ("qwen3_coder", "hermes")


def chat_template(name: str) -> str:
    if name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}; known: {', '.join(TEMPLATES)}")
    return resources.files("rlkit.embedded").joinpath(f"templates/{name}.jinja").read_text()


def _corpus(limit_bytes: int = 4_000_000) -> list[str]:
    """Python source (stdlib) plus both templates' prose: enough for a code-ish BPE."""
    texts = [chat_template(t) for t in TEMPLATES]
    total = 0
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(errors="ignore")
        texts.append(text)
        total += len(text)
        if total > limit_bytes:
            break
    return texts


def recipe(template: str, vocab_size: int, hidden: int, layers: int) -> dict:
    return {"version": RECIPE_VERSION, "template": template, "vocab_size": vocab_size,
            "hidden": hidden, "layers": layers}


def build_tiny_model(out_dir: str | Path, *, template: str = "qwen3_coder", vocab_size: int = 6000,
                     hidden: int = 128, layers: int = 2, max_context: int = 40960, seed: int = 0) -> Path:
    out = Path(out_dir)
    want = recipe(template, vocab_size, hidden, layers)
    marker = out / "rlkit_tiny.json"
    if marker.exists() and json.loads(marker.read_text()) == want:
        return out
    from filelock import FileLock

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(out.parent / f".{out.name}.lock"):  # two processes (test workers) never write it at once
        if marker.exists() and json.loads(marker.read_text()) == want:
            return out
        return _build(out, marker, want, template, vocab_size, hidden, layers, max_context, seed)


def _build(out: Path, marker: Path, want: dict, template: str, vocab_size: int, hidden: int, layers: int,
           max_context: int, seed: int) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + ADDED_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(), trainer=trainer)

    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=[], model_max_length=max_context)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.add_tokens(ADDED_TOKENS)  # already in the vocab; this marks them as added, non-special
    tok.chat_template = chat_template(template)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(tok.chat_template)

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=max_context,
        tie_word_embeddings=False, bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = config.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    marker.write_text(json.dumps(want))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="rlkit model tiny", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--template", choices=TEMPLATES, default="qwen3_coder")
    args = parser.parse_args(argv)
    path = build_tiny_model(args.out_dir, template=args.template)
    print(path)
    return 0
