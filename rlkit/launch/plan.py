"""The launch plan: every command a run starts, as data.

DRY_RUN prints it; the training runner (later) executes it. Every node runs the same
config; the node whose local IP matches RAY_HEAD_ADDRESS is rank 0 (an empty address
means this node is the head of a one-node run). Rank 0 starts the Ray head and the
verl trainer; the other nodes join Ray as workers.
"""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.config.resolve import ResolvedConfig
from rlkit.config.schema import VerlTrainerMode
from rlkit.launch.verl_overrides import TRAINER_MODULE, verl_overrides

LOOPBACK = {"", "localhost", "127.0.0.1", "::1"}


def local_ips(towards: str = "") -> set[str]:
    ips = {"127.0.0.1"}
    try:
        ips |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    if towards and towards not in LOOPBACK:
        try:  # the source address the kernel would use to reach the head; sends nothing
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((towards, 9))
                ips.add(s.getsockname()[0])
        except OSError:
            pass
    return ips


def is_head_node(head_address: str, ips: set[str] | None = None) -> bool:
    if head_address in LOOPBACK:
        return True
    return head_address in (ips if ips is not None else local_ips(head_address))


@dataclass(frozen=True)
class Command:
    role: str  # what it is, e.g. "ray head"
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    where: str = "rank 0"  # which node(s) run it

    def render(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        args = [shlex.quote(a) for a in self.argv]
        if len(args) > 10:  # long override lists: one per line, still pasteable
            args = [" ".join(args[:3]), *args[3:]]
        body = " \\\n    ".join(args) if len(args) > 10 else " ".join(args)
        return f"{env} {body}" if env else body


@dataclass
class LaunchPlan:
    node_is_head: bool
    head_address: str
    ray_head: Command
    ray_worker: Command
    trainer: Command
    rollout: dict[str, object]
    overrides: list[str]

    def commands_for_this_node(self) -> list[Command]:
        return [self.ray_head, self.trainer] if self.node_is_head else [self.ray_worker]

    def render(self) -> str:
        me = "rank 0, the Ray head" if self.node_is_head else "a Ray worker"
        lines = [f"Launch plan (this node is {me}; head {self.head_address})", "", "# Ray head (rank 0)", self.ray_head.render(), "",
                 "# Ray workers (every other node)", self.ray_worker.render(), "", "# Rollout / vLLM"]
        width = max(map(len, self.rollout))
        lines += [f"#   {k.ljust(width)} = {v}" for k, v in self.rollout.items()]
        lines += ["", "# Trainer (rank 0)", self.trainer.render()]
        return "\n".join(lines)


def build_plan(resolved: ResolvedConfig, ips: set[str] | None = None) -> LaunchPlan:
    c = resolved.config
    root = resolved.path("OUTPUT_DIR") or resolved.root
    head = c.RAY_HEAD_ADDRESS or "127.0.0.1"
    head_here = is_head_node(c.RAY_HEAD_ADDRESS, ips)
    ray_head = Command("ray head", ["ray", "start", "--head", f"--node-ip-address={head}", f"--port={c.RAY_PORT}",
                                    f"--num-gpus={c.GPUS_PER_NODE}", "--dashboard-host=0.0.0.0",
                                    "--disable-usage-stats"])
    ray_worker = Command("ray worker", ["ray", "start", f"--address={head}:{c.RAY_PORT}",
                                        f"--num-gpus={c.GPUS_PER_NODE}", "--disable-usage-stats", "--block"],
                         where="ranks 1..NNODES-1")
    paths = {
        "model_path": resolved.path("MODEL_PATH") or Path(""),
        "train_files": resolved.path("TRAIN_FILES") or Path(""),
        "val_files": resolved.path("VAL_FILES") or Path(""),
        "checkpoint_dir": root / "checkpoints" / c.PROJECT_NAME / c.EXP_NAME,
    }
    overrides = verl_overrides(c, **paths)
    env = {"RAY_ADDRESS": f"{head}:{c.RAY_PORT}"}
    if "file" in c.LOGGER:
        env["VERL_FILE_LOGGER_PATH"] = str(RunPaths(root, c.PROJECT_NAME, c.EXP_NAME).jsonl)
    if c.WANDB_API_KEY and "wandb" in c.LOGGER:
        env["WANDB_API_KEY"] = "****"  # the real key is passed through the environment, never printed
    trainer = Command("verl trainer", ["python", "-m", TRAINER_MODULE, *overrides], env)
    separate = c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC
    rollout_gpus = (c.N_NODES_ROLLOUT if separate else c.N_NODES_TRAIN) * c.GPUS_PER_NODE
    rollout = {
        "engine": "vllm (verl rollout name=vllm, mode=async)",
        "placement": f"{c.N_NODES_ROLLOUT} dedicated node(s)" if separate else "colocated with training",
        "replicas": f"{rollout_gpus // max(c.ROLLOUT_TP, 1)} x TP {c.ROLLOUT_TP}",
        "max_model_len": c.MAX_PROMPT + c.MAX_RESP,
        "gpu_memory_utilization": c.ROLLOUT_GPU_MEM,
        "tool_call_parser": c.TOOL_CALL_PARSER.value,
        "responses_per_prompt": c.N_RESP,
        "proxy": f"0.0.0.0:{c.PROXY_PORT} (agents -> proxy -> vLLM; {c.AGENT_API.value} API)",
        "agent": f"{c.HARBOR_AGENT} ({c.SCAFFOLD.value}) in {c.BACKEND.value} sandboxes, "
                 f"{c.MAX_SANDBOXES}/node, network {c.SANDBOX_NETWORK}",
        "dashboard": f"0.0.0.0:{c.DASHBOARD_PORT}",
    }
    return LaunchPlan(head_here, head, ray_head, ray_worker, trainer, rollout, overrides)
