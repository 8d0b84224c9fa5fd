"""The one door to verl's training math: `verl.trainer.ppo.core_algos` and its ActorConfig.

Normally this is a plain import. Where Ray is not installed (a bare GPU box running
bench/gpu_update.py), verl's package `__init__` cannot run, because `verl.protocol` and the
profiler's worker decorators import Ray. The math itself needs no Ray, so then the same
`core_algos.py` file is loaded with those two package `__init__`s skipped. No verl code is
copied or re-derived either way.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from functools import cache
from typing import Any


@cache
def core_algos() -> Any:
    if importlib.util.find_spec("ray") is not None:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    return _core_algos_without_ray()


def _core_algos_without_ray() -> Any:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise ImportError("verl is not installed: the training math comes from verl.trainer.ppo.core_algos")
    if "verl" in sys.modules and getattr(sys.modules["verl"], "__file__", None):
        return importlib.import_module("verl.trainer.ppo.core_algos")  # the real package is already up
    base = os.path.dirname(spec.origin)

    def bare_package(name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(base, *name.split(".")[1:])]
        sys.modules[name] = module
        return module

    bare_package("verl")                        # skips verl/__init__ (verl.protocol imports ray)
    importlib.import_module("verl.utils")
    profiler = bare_package("verl.utils.profiler")  # skips profiler/__init__ (worker decorators import ray)
    profiler.ProfilerConfig = importlib.import_module("verl.utils.profiler.config").ProfilerConfig
    return importlib.import_module("verl.trainer.ppo.core_algos")


def actor_config(**fields: Any) -> Any:
    """verl's ActorConfig (core_algos' policy losses read clip ratios and global_batch_info from it)."""
    core_algos()  # makes verl.workers.config importable on the Ray-less path too
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **fields)


def policy_loss_config(**fields: Any) -> Any:
    core_algos()
    from verl.workers.config import PolicyLossConfig

    return PolicyLossConfig(**fields)
