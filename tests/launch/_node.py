"""One node of a launch test: `rlkit train CFG`'s plan for this node, executed, with the
trainer command swapped for a probe that prints the Ray cluster it sees (no GPUs here)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.config.resolve import resolve
from rlkit.launch.cluster import Waits, execute
from rlkit.launch.plan import build_plan

PROBE = ("import json, ray; ray.init(logging_level='ERROR', log_to_driver=False); "
         "print('CLUSTER', json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])), flush=True)")


def main() -> int:
    resolved = resolve(Path(sys.argv[1]), dict(os.environ))
    plan = build_plan(resolved)
    plan.trainer = dataclasses.replace(plan.trainer, argv=[sys.executable, "-c", PROBE])
    print(plan.render(), flush=True)
    c = resolved.config
    paths = RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME, c.EXP_NAME)
    return execute(plan, log=paths.console_log, vllm_log=paths.vllm_log, gpus_per_node=c.GPUS_PER_NODE,
                   waits=Waits(nodes_s=c.NODE_WAIT_S, replicas_s=c.REPLICA_WAIT_S, poll_s=1.0, progress_s=5.0))


if __name__ == "__main__":
    sys.exit(main())
