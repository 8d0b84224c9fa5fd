"""Checks on the policy checkpoint: a model directory, its context and its architecture.

Only small JSON files are read (config.json, tokenizer_config.json); no weights, no
tokenizer library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlkit.config.schema import ModelEngine
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "max_seq_len")


@dataclass
class ModelInfo:
    path: Path
    config: dict
    chat_template: str | None
    tokenizer_file: Path | None
    weight_bytes: int

    def text_config(self) -> dict:
        """Multimodal configs nest the language model's settings."""
        nested = self.config.get("text_config") or self.config.get("language_config") or {}
        return {**self.config, **nested} if isinstance(nested, dict) else self.config

    @property
    def context(self) -> int | None:
        cfg = self.text_config()
        for k in CONTEXT_KEYS:
            if isinstance(cfg.get(k), int):
                return cfg[k]
        return None

    @property
    def experts(self) -> int:
        cfg = self.text_config()
        return max([int(cfg[k]) for k in MOE_KEYS if isinstance(cfg.get(k), int)] or [0])


def read_chat_template(path: Path) -> str | None:
    """Where transformers looks: chat_template.jinja, chat_template.json, tokenizer_config.json."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    for name in ("chat_template.json", "tokenizer_config.json"):
        f = path / name
        if f.is_file():
            try:
                template = json.loads(f.read_text()).get("chat_template")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(template, list):  # named templates: [{name, template}]
                template = next((t.get("template") for t in template if t.get("name") == "default"), None)
            if isinstance(template, str):
                return template
    return None


class ModelDirError(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


def load_model_info(path: Path) -> ModelInfo:
    if not path.exists():
        raise ModelDirError(f"MODEL_PATH {path} does not exist", "point MODEL_PATH at a local HF checkpoint "
                            "directory (the embedded one is built by `rlkit model tiny .rlkit/models/tiny-qwen3`)")
    if not path.is_dir():
        raise ModelDirError(f"MODEL_PATH {path} is not a directory", "point MODEL_PATH at the checkpoint directory")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelDirError(f"{path} has no config.json", "use a HuggingFace-format checkpoint (merge verl shards "
                            "with `python -m verl.model_merger merge`)")
    try:
        config = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise ModelDirError(f"{cfg_file} is not valid JSON ({exc})", "re-save the checkpoint") from None
    tokenizer = next((path / n for n in TOKENIZER_FILES if (path / n).is_file()), None)
    weights = sum(f.stat().st_size for f in path.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file())
    return ModelInfo(path, config, read_chat_template(path), tokenizer, weights)


def model_info(ctx: Context) -> ModelInfo | ModelDirError:
    if "model" not in ctx.notes:
        path = ctx.resolved.path("MODEL_PATH")
        if "MODEL_PATH" in ctx.resolved.bad_keys:
            ctx.notes["model"] = ModelDirError("MODEL_PATH is not set", "set MODEL_PATH (see changeme / types)")
        elif path is None:
            ctx.notes["model"] = ModelDirError("MODEL_PATH is empty", "set MODEL_PATH in the run config")
        else:
            try:
                ctx.notes["model"] = load_model_info(path)
            except ModelDirError as exc:
                ctx.notes["model"] = exc
    return ctx.notes["model"]  # type: ignore[return-value]


def model_dir(ctx: Context) -> list[Finding]:
    info = model_info(ctx)
    where = ctx.resolved.where("MODEL_PATH")
    if "MODEL_PATH" in ctx.resolved.bad_keys:
        return [skip("model_dir", "MODEL_PATH is not set (see changeme / types)")]
    if isinstance(info, ModelDirError):
        return [fatal("model_dir", info.message, info.fix, key="MODEL_PATH", where=where)]
    out = []
    if info.tokenizer_file is None:
        out.append(fatal("model_dir", f"{info.path} has no tokenizer ({' / '.join(TOKENIZER_FILES)})",
                         "copy the tokenizer files of the base model into MODEL_PATH", key="MODEL_PATH", where=where))
    if info.chat_template is None:
        out.append(fatal("model_dir", f"{info.path} has no chat template", "copy chat_template.jinja (or the "
                         "tokenizer_config.json with chat_template) of the base model into MODEL_PATH",
                         key="MODEL_PATH", where=where))
    if info.weight_bytes == 0:
        out.append(warn("model_dir", f"{info.path} holds no weight files", "check that the checkpoint was fully "
                        "copied (*.safetensors)", key="MODEL_PATH", where=where))
    return out or [ok("model_dir", f"{info.path} ({info.config.get('model_type', '?')}, "
                   f"{info.weight_bytes / 2**20:.1f} MiB of weights)")]


def context_length(ctx: Context) -> list[Finding]:
    info = model_info(ctx)
    if isinstance(info, ModelDirError):
        return [skip("context_length", "no model directory")]
    c = ctx.resolved.config
    total = c.MAX_PROMPT + c.MAX_RESP
    if info.context is None:
        return [warn("context_length", "config.json declares no max_position_embeddings",
                     "confirm the model's context by hand", key="MAX_RESP")]
    if total > info.context:
        return [fatal("context_length", f"MAX_PROMPT + MAX_RESP = {total} exceeds the model context "
                      f"{info.context}", f"lower MAX_RESP to {max(info.context - c.MAX_PROMPT, 0)} or less",
                      key="MAX_RESP", where=ctx.resolved.where("MAX_RESP"))]
    return [ok("context_length", f"{total} <= {info.context} tokens")]


def model_engine(ctx: Context) -> list[Finding]:
    """veomni for MoE (expert parallel), fsdp for dense. MoE on fsdp is fatal: no expert parallelism."""
    info = model_info(ctx)
    if isinstance(info, ModelDirError):
        return [skip("model_engine", "no model directory")]
    engine = ctx.resolved.config.MODEL_ENGINE
    where = ctx.resolved.where("MODEL_ENGINE")
    kind = f"MoE ({info.experts} experts)" if info.experts > 1 else "dense"
    if info.experts > 1 and engine is ModelEngine.FSDP:
        return [fatal("model_engine", f"the model is {kind} but MODEL_ENGINE=fsdp", "set MODEL_ENGINE=veomni",
                      key="MODEL_ENGINE", where=where)]
    if info.experts <= 1 and engine is ModelEngine.VEOMNI:
        return [warn("model_engine", "the model is dense but MODEL_ENGINE=veomni", "set MODEL_ENGINE=fsdp",
                     key="MODEL_ENGINE", where=where)]
    return [ok("model_engine", f"{kind} model on {engine.value}")]
