"""A policy checkpoint's small JSON files, read safely and typed: config.json and tokenizer_config.json.

Preflight (`rlkit.validate.model`), DRY_RUN and the trainers (`rlkit.launch.inference`,
`rlkit.launch.weight_sync`) read the model through this one module, so they agree on its
window (`max_position_embeddings`) and on what is malformed. Only the fields rlkit reads are
typed; every other field of an HF config is kept as it is. A field of the wrong type, a
window that is not a positive count of tokens, an integer too long to be a count, nesting
past the reader's bound: each is a FileReadError naming the file and the field.

A model folder may sit on a disk others write: its files are read with the folder as their root
(`model_root`), so a config.json or a tokenizer file that is a link out of it (to /etc/shadow) is
refused. A Hugging Face hub snapshot links its files into the repository's blobs/: its root is the
repository folder (models--org--name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from rlkit.config.files import FileReadError, read_model

WINDOW_MAX = 2**26  # tokens; no model's context is longer
RESAVE = "re-save the checkpoint's files from the base model (or re-download them)"
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "max_seq_len")
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")

Window = Annotated[StrictInt, Field(ge=1, le=WINDOW_MAX)]
Experts = Annotated[StrictInt, Field(ge=0, le=1_000_000)]
Name = Annotated[StrictStr, Field(max_length=256)]


class _Lm(BaseModel):
    """The fields of a language model's config rlkit reads (None: absent or null)."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    model_type: Name | None = None
    max_position_embeddings: Window | None = None
    max_sequence_length: Window | None = None
    seq_length: Window | None = None
    n_positions: Window | None = None
    max_seq_len: Window | None = None
    num_experts: Experts | list[Experts] | None = None  # a list per modality (ERNIE-4.5-VL)
    num_local_experts: Experts | list[Experts] | None = None
    n_routed_experts: Experts | list[Experts] | None = None
    moe_num_experts: Experts | list[Experts] | None = None
    torch_dtype: Name | None = None
    dtype: Name | None = None
    tie_word_embeddings: StrictBool | None = None


class ModelConfig(_Lm):
    """config.json. Multimodal models nest the language model's settings in text_config / language_config."""

    text_config: _Lm | None = None
    language_config: _Lm | None = None

    def lm(self) -> _Lm:
        return self.text_config or self.language_config or self

    def field(self, name: str) -> Any:
        """A field of the language model, falling back to the top level."""
        nested = self.text_config or self.language_config
        value = getattr(nested, name, None) if nested is not None else None
        return value if value is not None else getattr(self, name, None)

    @property
    def window(self) -> int | None:
        """The model's context window in tokens (None when config.json declares none)."""
        return next((v for v in (self.field(k) for k in CONTEXT_KEYS) if v is not None), None)

    @property
    def experts(self) -> int:
        found: list[int] = []
        for v in (self.field(k) for k in MOE_KEYS):
            found += v if isinstance(v, list) else [] if v is None else [v]
        return max(found or [0])

    @property
    def ties_embeddings(self) -> bool:
        return bool(self.field("tie_word_embeddings"))

    @property
    def dtype_name(self) -> str:
        return str(self.field("torch_dtype") or self.field("dtype") or "bfloat16")


class NamedTemplate(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    name: StrictStr | None = None
    template: StrictStr


class TokenizerConfig(BaseModel):
    """tokenizer_config.json / chat_template.json: where a chat template may live."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    chat_template: StrictStr | list[NamedTemplate] | None = None

    def template(self) -> str | None:
        t = self.chat_template
        if isinstance(t, list):  # named templates: the default one
            return next((x.template for x in t if x.name == "default"), None)
        return t


def model_root(model_dir: str | Path) -> Path:
    """The folder a model's files may not leave: the model folder, or for a Hugging Face hub snapshot
    (models--org--name/snapshots/<rev>, whose files link into ../../blobs) the repository folder."""
    path = Path(model_dir)
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent
    return path


def read_model_config(model_dir: str | Path) -> ModelConfig:
    """MODEL_PATH/config.json, typed; FileReadError names the file and what is wrong."""
    return read_model(Path(model_dir) / "config.json", ModelConfig, fix=RESAVE, root=model_root(model_dir))


def read_tokenizer_config(path: str | Path) -> TokenizerConfig:
    return read_model(path, TokenizerConfig, fix=RESAVE, root=model_root(Path(path).parent))


class FsdpConfig(BaseModel):
    """A verl checkpoint's actor/fsdp_config.json: how many ranks wrote its shards."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    world_size: Annotated[StrictInt, Field(ge=1, le=65536)]


def read_world_size(actor_dir: str | Path) -> int:
    """The world size a verl actor checkpoint was saved with; FileReadError when its fsdp_config.json is not one."""
    return read_model(Path(actor_dir) / "fsdp_config.json", FsdpConfig, max_bytes=2**20,
                      fix="pick a checkpoint that finished saving").world_size


def model_window(model_dir: str | Path) -> int | None:
    """The model's window; None when config.json declares none. FileReadError when it is unreadable."""
    return read_model_config(model_dir).window


__all__ = ["FileReadError", "ModelConfig", "TokenizerConfig", "model_root", "model_window", "read_model_config",
           "read_tokenizer_config", "read_world_size"]
