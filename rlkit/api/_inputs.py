"""How the API's functions read their arguments: a config (path or resolved) and keyword overrides."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig


def argument_error(message: str) -> Exception:
    """rlkit.errors.ArgumentError (a TypeError too), imported when raised: `import rlkit` stays one module."""
    from rlkit.errors import ArgumentError

    return ArgumentError(message, fix="see the function's docstring (help(rlkit.FUNCTION))")


def config_overrides(function: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments in upper case are config keys (overrides); any other unknown one is a typo."""
    for name in kwargs:
        if not name.isupper():
            raise argument_error(f"{function}() got an unexpected keyword argument {name!r} "
                                 "(config keys are upper case)")
    return dict(kwargs)


def is_config(value: object) -> bool:
    from rlkit.config.resolve import ResolvedConfig

    return isinstance(value, ResolvedConfig)


def as_resolved(config: Any, overrides: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> ResolvedConfig:
    """A resolved config: `config` itself when nothing is added, else resolved again with the overrides
    on top of those it already had (so the layers are exactly those a file would give)."""
    from rlkit.config.resolve import ResolvedConfig, resolve

    if isinstance(config, ResolvedConfig):
        if not overrides and environ is None:
            return config
        merged = {**config.overrides, **(overrides or {})}
        return resolve(config.config_path, config.environ if environ is None else environ, overrides=merged)
    if not isinstance(config, (str, os.PathLike)):
        raise argument_error(f"expected a run config path or a resolved config, got {type(config).__name__}")
    return resolve(Path(config), environ, overrides=overrides)
