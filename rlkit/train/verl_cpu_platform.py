"""verl's platform for a machine without accelerators: device `cpu`, collectives on gloo.

verl 0.9.1 knows CUDA, ROCm and Ascend NPU (`verl/plugin/platform/`); with none present it
falls back to NVIDIA and its workers call `torch.cuda`. This platform is registered with
verl's `PlatformRegistry` as `cpu` and chosen with `VERL_PLATFORM=cpu`; only the CPU launch
plan sets both (`rlkit.train.verl_cpu` is imported through `VERL_USE_EXTERNAL_MODULES`), so a
GPU node never loads it.

Ray still schedules verl's workers on `GPU` bundles: the CPU plan's `ray start` declares
`--num-gpus=GPUS_PER_NODE` logical GPUs, so verl's resource pools stay the ones a GPU
cluster builds (one bundle, one FSDP rank per declared GPU).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _memory() -> tuple[int, int]:
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def _process_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def device_module() -> types.SimpleNamespace:
    """What verl calls as `get_torch_device()`: torch.cpu, plus the torch.cuda calls verl makes
    around memory and RNG, answered for host memory (caches: nothing to free)."""
    cpu = torch.cpu
    return types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: "cpu",
        set_device=lambda index: None, synchronize=lambda device=None: None,
        current_stream=cpu.current_stream, stream=cpu.stream, Stream=cpu.Stream, Event=cpu.Event,
        empty_cache=lambda: None, ipc_collect=lambda: None,
        mem_get_info=lambda device=None: _memory(),
        memory_allocated=lambda device=None: _process_bytes(), memory_reserved=lambda device=None: _process_bytes(),
        max_memory_allocated=lambda device=None: _process_bytes(),
        max_memory_reserved=lambda device=None: _process_bytes(),
        reset_peak_memory_stats=lambda device=None: None,
        set_per_process_memory_fraction=lambda fraction, device=None: None,
        get_rng_state=lambda device=None: torch.get_rng_state(),
        set_rng_state=lambda state, device=None: torch.set_rng_state(state),
        manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
        get_device_name=lambda device=None: "cpu", is_initialized=lambda: True,
    )


def gloo_process_groups() -> None:
    """verl's Ray workers open their process group as `cpu:gloo,<device>:<backend>`, which torch
    rejects for the device `cpu` ("Duplicate device type cpu"); on this platform it is plain
    `gloo`. Patched while `import verl` runs, before a worker module binds the name."""
    from verl.utils import distributed

    if getattr(distributed, "_rlkit_gloo", False):
        return
    ray_group = distributed.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
        return ray_group(timeout_second=timeout_second, backend=backend or "gloo")

    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    distributed._rlkit_gloo = True


def fsdp_engines_on_cpu() -> None:
    """verl's FSDP engines (actor and critic) are registered for the devices cuda and npu; the
    same classes serve the device cpu (they reach the device only through the platform)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if PLATFORM_NAME not in EngineRegistry._engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM_NAME)(engine)


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """Host CPU: torch's CPU tensors, gloo collectives, no IPC, no profiler ranges."""

    _module = device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: VERL_PLATFORM=cpu chooses it

    def current_device(self) -> Any:
        # verl moves tensors with `.to(get_device_id())`: an int would mean cuda:<n>
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the declared GPUs; nothing reads it here

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


# On import, so that whichever of this module and verl is imported first, both run once verl is up
# (importing this module first imports verl, whose plugin hook imports rlkit.train.verl_cpu).
gloo_process_groups()
fsdp_engines_on_cpu()
