"""Checks on the policy checkpoint: a model directory, its context and its architecture.

Only small JSON files are read (config.json, tokenizer_config.json), through the typed readers
of `rlkit.config.model_files` (the ones DRY_RUN and the trainers use); no weights, no tokenizer
library. Any malformed file (not a regular file, too big, not UTF-8, not JSON, nested too deeply,
a field of the wrong type or out of range) is a ModelDirError naming the file and what is
wrong, which model_dir reports as FATAL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlkit.config.files import FileReadError, confine, exists, is_dir, is_file, present, read_text
from rlkit.config.model_files import RESAVE, ModelConfig, model_root, read_model_config, read_tokenizer_config
from rlkit.config.schema import ModelEngine
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
CHAT_TEMPLATE_MAX_BYTES = 2**20  # real templates are a few KiB


@dataclass
class ModelInfo:
    path: Path
    model: ModelConfig
    chat_template: str | None
    tokenizer_file: Path | None
    weight_bytes: int

    @property
    def config(self) -> dict:
        """config.json as a dict, with the dtype the language model declares."""
        return {**self.model.model_dump(exclude_none=True), "torch_dtype": self.model.dtype_name}

    @property
    def context(self) -> int | None:
        return self.model.window

    @property
    def experts(self) -> int:
        return self.model.experts


class ModelDirError(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


def read_chat_template(path: Path) -> str | None:
    """Where transformers looks: chat_template.jinja, chat_template.json, tokenizer_config.json.
    None when there is none; ModelDirError when a file that holds one is malformed."""
    jinja = path / "chat_template.jinja"
    try:
        if present(jinja):
            return read_text(jinja, max_bytes=CHAT_TEMPLATE_MAX_BYTES, root=model_root(path))
        for name in ("chat_template.json", "tokenizer_config.json"):
            if present(path / name):
                template = read_tokenizer_config(path / name).template()
                if template is not None:
                    return template
    except FileReadError as exc:
        raise ModelDirError(exc.message, exc.fix or RESAVE) from None
    return None


def load_model_info(path: Path) -> ModelInfo:
    if not exists(path):
        raise ModelDirError(f"MODEL_PATH {path} does not exist", "point MODEL_PATH at a local HF checkpoint "
                            "directory (the embedded one is built by `rlkit model tiny .rlkit/models/tiny-qwen3`)")
    if not is_dir(path):
        raise ModelDirError(f"MODEL_PATH {path} is not a directory", "point MODEL_PATH at the checkpoint directory")
    cfg_file = path / "config.json"
    if not present(cfg_file):
        raise ModelDirError(f"{path} has no config.json", "use a HuggingFace-format checkpoint (merge verl shards "
                            "with `python -m verl.model_merger merge`)")
    try:
        config = read_model_config(path)
    except FileReadError as exc:
        raise ModelDirError(exc.message, exc.fix or RESAVE) from None
    tokenizer = next((path / n for n in TOKENIZER_FILES if is_file(path / n)), None)
    if tokenizer is not None:
        try:  # the probe, vLLM and the proxy read it: a link out of the model folder is not theirs to read
            confine(tokenizer, model_root(path))
        except FileReadError as exc:
            raise ModelDirError(exc.message, exc.fix or RESAVE) from None
    try:
        weights = sum(f.stat().st_size for f in path.iterdir() if f.suffix in WEIGHT_SUFFIXES and is_file(f))
    except OSError as exc:
        raise ModelDirError(f"MODEL_PATH {path} cannot be listed ({exc.strerror or exc})",
                            "make the checkpoint directory readable") from None
    return ModelInfo(path, config, read_chat_template(path), tokenizer, weights)


def model_info(ctx: Context) -> ModelInfo | ModelDirError:
    if "model" not in ctx.notes:
        path = ctx.resolved.path("MODEL_PATH")
        if "MODEL_PATH" in ctx.resolved.bad_keys:
            ctx.notes["model"] = ModelDirError("MODEL_PATH is not set", "set MODEL_PATH (see config_syntax / changeme / types)")
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
        return [skip("model_dir", "MODEL_PATH is not usable (see config_syntax / changeme / types)")]
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
    return out or [ok("model_dir", f"{info.path} ({info.model.lm().model_type or info.model.model_type or '?'}, "
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
    if c.MAX_PROMPT >= info.context:
        return [fatal("context_length", f"MAX_PROMPT={c.MAX_PROMPT} is beyond the model's window of "
                      f"{info.context} tokens (no room left for a response)",
                      f"lower MAX_PROMPT below {info.context} (and MAX_PROMPT + MAX_RESP to {info.context} or less)",
                      key="MAX_PROMPT", where=ctx.resolved.where("MAX_PROMPT"))]
    if total > info.context:
        return [fatal("context_length", f"MAX_PROMPT + MAX_RESP = {total} exceeds the model context "
                      f"{info.context}", f"lower MAX_RESP to {info.context - c.MAX_PROMPT} or less",
                      key="MAX_RESP", where=ctx.resolved.where("MAX_RESP"))]
    return [ok("context_length", f"{total} <= {info.context} tokens (vLLM's --max-model-len {total})")]


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
