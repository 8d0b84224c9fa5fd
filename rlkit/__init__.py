"""rlkit: RL training of coding-agent LLM policies on real repository tasks.

The public API (rlkit.api, re-exported here) does everything the `rlkit` command does:

    import rlkit
    report = rlkit.check("my_run.env", TRAIN_BSZ=8)      # Run Validation; upper-case keywords override keys
    result = rlkit.train("my_run.env", TOTAL_STEPS=2)    # blocking, in this process
    handle = rlkit.run("my_run.env")                     # background: pid, log, lock
    rlkit.status(handle), rlkit.eval(model_dir, "val.parquet", k=4), rlkit.cleanup("my_run.env")

Heavy modules (ray, torch, verl, vllm) are imported lazily by the code paths that
need them, so `import rlkit` and `rlkit.check` stay fast.
"""

import functools
import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

from rlkit.api import (
    check,
    ckpt_merge,
    ckpt_prune,
    cleanup,
    eval,
    resolve,
    rollout,
    run,
    status,
    tasks_check,
    train,
)

__version__ = "0.1.0"

__all__ = ["__version__", "check", "ckpt_merge", "ckpt_prune", "cleanup", "eval", "resolve", "rollout", "run",
           "status", "tasks_check", "train"]


class _FunctionAndPackage:
    """`rlkit.train` and `rlkit.rollout` are API functions and also the names of subpackages. Calling one
    runs the function; an attribute is the subpackage's, so dotted paths into it keep resolving
    (`import rlkit.train.local as m`, hydra's `_target_: rlkit.train.verl_agent_loop.RlkitAgentLoop`)."""

    def __init__(self, function: Callable[..., Any], package: str) -> None:
        functools.update_wrapper(self, function)
        self._package = package

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the function's own (inspect asks for __signature__ and the like)
            raise AttributeError(name)
        package = importlib.import_module(self._package)
        try:
            return getattr(package, name)
        except AttributeError:
            pass
        try:
            return importlib.import_module(f"{self._package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{self._package}.{name}":
                raise
            raise AttributeError(f"module {self._package!r} has no attribute {name!r}") from None

    def __repr__(self) -> str:
        return f"<rlkit API function {self.__name__} (also the package {self._package})>"  # type: ignore[attr-defined]


class _Rlkit(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # The import system sets a subpackage as an attribute of its parent once it is imported: the API
        # function of the same name stays (it reaches the subpackage's attributes itself).
        if isinstance(value, types.ModuleType) and isinstance(self.__dict__.get(name), _FunctionAndPackage):
            return
        super().__setattr__(name, value)


train = _FunctionAndPackage(train, "rlkit.train")  # type: ignore[assignment]
rollout = _FunctionAndPackage(rollout, "rlkit.rollout")  # type: ignore[assignment]
sys.modules[__name__].__class__ = _Rlkit
