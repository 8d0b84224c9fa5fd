"""What rlkit registers with verl for VERL_DEVICE=cpu, seen from a process the way verl's are started.

`import verl` with the CPU plan's environment (VERL_PLATFORM=cpu, VERL_USE_EXTERNAL_MODULES=
rlkit.train.verl_cpu) must leave verl choosing the cpu device, gloo, its FSDP engine, the
vllm_http replica and adapter, and a gloo process group; without that environment (a GPU node)
none of it is loaded. A subprocess each, since verl picks its platform once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
import verl
from verl.utils.device import get_device_name, get_nccl_backend
from verl.workers.rollout.replica import RolloutReplicaRegistry
print(json.dumps({"device": get_device_name() if "cpu" in sys.argv else None, "backend": get_nccl_backend()
                  if "cpu" in sys.argv else None, "loaded": "rlkit.train.verl_cpu" in sys.modules,
                  "replicas": sorted(RolloutReplicaRegistry._registry)}))
if "cpu" in sys.argv:
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class
    initialize_global_process_group_ray()  # gloo, world of one
    print(json.dumps({"engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
                      "replica": get_rollout_replica_class("vllm_http").__name__,
                      "adapter": get_rollout_class("vllm_http").__name__, "group": dist.get_backend()}))
"""


def _probe(env: dict[str, str], *args: str) -> list[dict]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300,
                          env={**base, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0",
                               **env}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_the_cpu_plan_environment_registers_rlkits_platform_and_rollout() -> None:
    first, second = _probe({"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "rlkit.train.verl_cpu"}, "cpu")
    assert (first["device"], first["backend"], first["loaded"]) == ("cpu", "gloo", True)
    assert "vllm_http" in first["replicas"] and "vllm" in first["replicas"]
    assert second == {"engine": "FSDPEngineWithLMHead", "replica": "HttpVllmReplica",
                      "adapter": "HttpServerAdapter", "group": "gloo"}


def test_a_gpu_node_loads_none_of_it() -> None:
    (only,) = _probe({})
    assert only["loaded"] is False and "vllm_http" not in only["replicas"]
