"""The launch plan and verl overrides; verl's own hydra config accepts them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.config.resolve import resolve
from rlkit.launch.plan import build_plan, is_head_node, ray_executable
from rlkit.launch.ray_node import head_port
from rlkit.launch.verl_overrides import hydra_value

REPO = Path(__file__).resolve().parents[2]
COMBOS = {
    "grpo-sync-fsdp": {"ALGORITHM": "grpo"},
    "gspo-async-veomni": {"ALGORITHM": "gspo", "TRAINING_MODE": "async", "MODEL_ENGINE": "veomni", "NNODES": 3,
                          "N_NODES_TRAIN": 2, "N_NODES_ROLLOUT": 1, "SP_SIZE": 2, "EP_SIZE": 2, "TRAIN_BSZ": 8,
                          "MINI_BSZ": 2, "PARAM_SYNC_STEPS": 4, "LOGGER": "console,wandb"},
    "ppo-sync-fsdp": {"ALGORITHM": "ppo", "NNODES": 2, "N_NODES_TRAIN": 2, "ROLLOUT_TP": 2},
    "grpo-sync-cpu": {"VERL_DEVICE": "cpu", "GPUS_PER_NODE": 1, "VAL_N": 3},
}


def overrides_of(ws, combo: str) -> dict[str, str]:
    plan = build_plan(resolve(ws.config(**COMBOS[combo]), ws.environ()))
    return dict(o.split("=", 1) for o in plan.overrides)


def test_algorithm_overrides(ws) -> None:
    grpo, gspo, ppo, _ = (overrides_of(ws, c) for c in COMBOS)
    ar = "actor_rollout_ref.actor"
    assert grpo["algorithm.adv_estimator"] == "grpo" and grpo[f"{ar}.policy_loss.loss_mode"] == "vanilla"
    assert gspo["algorithm.adv_estimator"] == "grpo" and gspo[f"{ar}.policy_loss.loss_mode"] == "gspo"
    assert (gspo[f"{ar}.clip_ratio_low"], gspo[f"{ar}.clip_ratio_high"]) == ("0.0003", "0.0004")
    assert gspo[f"{ar}.loss_agg_mode"] == "seq-mean-token-mean"
    assert ppo["algorithm.adv_estimator"] == "gae" and "critic.model.path" in ppo
    assert ppo["critic.ulysses_sequence_parallel_size"] == "1"  # the critic shards sequences as the actor does
    assert "critic.model.path" not in grpo


def test_mode_and_engine_overrides(ws) -> None:
    grpo, gspo, _, _ = (overrides_of(ws, c) for c in COMBOS)
    assert grpo["trainer.v1.trainer_mode"] == "sync" and grpo["model_engine"] == "dp"
    assert grpo["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"] == "1"
    assert "actor_rollout_ref.hybrid_engine" not in grpo
    assert gspo["trainer.v1.trainer_mode"] == "separate_async" and gspo["model_engine"] == "veomni"
    assert gspo["actor_rollout_ref.actor.veomni.expert_parallel_size"] == "2"
    assert gspo["actor_rollout_ref.hybrid_engine"] == "false"
    assert gspo["actor_rollout_ref.rollout.nnodes"] == "1" and gspo["trainer.nnodes"] == "2"
    assert gspo["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nccl"
    assert gspo["trainer.v1.separate_async.parameter_sync_step"] == "4"
    assert gspo["trainer.logger"] == "[console,wandb]"
    assert grpo["trainer.default_local_dir"] == str(ws.root / "out" / "checkpoints" / "proj" / "exp")
    assert grpo["trainer.resume_mode"] == "auto"  # RESUME_MODE=auto: a restart resumes from the latest checkpoint


def test_rank_zero_is_the_node_with_the_head_ip() -> None:
    assert is_head_node("", set())
    assert is_head_node("10.1.2.3", {"127.0.0.1", "10.1.2.3"})
    assert not is_head_node("10.1.2.3", {"127.0.0.1", "10.9.9.9"})


def test_plan_for_a_worker_node(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="10.1.2.3")
    plan = build_plan(resolve(ws.config(), ws.environ()), ips={"10.9.9.9"})
    assert not plan.node_is_head
    assert [c.role for c in plan.commands_for_this_node()] == ["ray worker"]
    port = ws.site_values["RAY_PORT"]
    assert plan.ray_worker.argv[1:3] == ["start", f"--address=10.1.2.3:{port}"]
    assert plan.ray_worker.argv[0] == ray_executable() and Path(plan.ray_worker.argv[0]).is_absolute()
    head_plan = build_plan(resolve(ws.config(), ws.environ()), ips={"10.1.2.3"})
    assert [c.role for c in head_plan.commands_for_this_node()] == ["ray head", "verl trainer"]


def test_hydra_quoting() -> None:
    assert hydra_value("/plain/path.parquet") == "/plain/path.parquet"
    assert hydra_value("/a b/c,d") == "'/a b/c,d'"
    assert hydra_value(["console", "file"]) == "[console,file]"
    assert hydra_value(True) == "true"


def _compose(sets: list[list[str]]) -> list[dict]:
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_compose_verl.py"))], check=True,
                          input=json.dumps(sets), capture_output=True, text=True)
    return json.loads(proc.stdout)


def test_verl_config_accepts_every_combination(ws) -> None:
    plans = {c: build_plan(resolve(ws.config(**COMBOS[c]), ws.environ())) for c in COMBOS}
    results = _compose([p.overrides for p in plans.values()] + [["trainer.not_a_verl_key=1"]])
    assert results[-1]["ok"] is False  # the harness does reject unknown keys
    for combo, result in zip(COMBOS, results, strict=False):
        assert result["ok"], f"{combo}: {result.get('error')}"
    grpo, gspo, ppo, cpu = (r["config"] for r in results[:4])
    assert gspo["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "gspo"
    assert gspo["trainer"]["v1"]["trainer_mode"] == "separate_async"
    assert gspo["actor_rollout_ref"]["actor"]["veomni"]["expert_parallel_size"] == 2
    assert grpo["actor_rollout_ref"]["rollout"]["multi_turn"]["format"] == "qwen3_coder"
    assert grpo["data"]["train_files"] == str(ws.train)
    assert ppo["algorithm"]["adv_estimator"] == "gae" and ppo["trainer"]["nnodes"] == 2
    assert cpu["actor_rollout_ref"]["rollout"]["name"] == "vllm_http" and cpu["trainer"]["device"] == "cpu"
    assert cpu["actor_rollout_ref"]["actor"]["strategy"] == "fsdp2"
    assert cpu["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"] == str(
        ws.root / "out" / "logs" / "exp_hydra" / "verl.jsonl")  # verl's Tracking runs in a Ray actor: the job's env carries it


def test_validation_samples_at_the_rollout_temperature(ws) -> None:
    """Bug 2 of the cluster path: verl's val_kwargs default to greedy (temperature 0), so VAL_N attempts
    were identical. The composed config samples validation as the rollout does, whatever it is set to."""
    plan = build_plan(resolve(ws.config(VAL_N=4), ws.environ()))
    default, warmer = (r["config"]["actor_rollout_ref"]["rollout"] for r in _compose(
        [plan.overrides, [*plan.overrides, "actor_rollout_ref.rollout.temperature=0.6",
                          "actor_rollout_ref.rollout.top_p=0.9"]]))
    for rollout in (default, warmer):
        val = rollout["val_kwargs"]
        assert (val["temperature"], val["top_p"], val["top_k"]) == (rollout["temperature"], rollout["top_p"],
                                                                     rollout["top_k"])
        assert val["n"] == 4 and val["do_sample"] is True
    assert default["val_kwargs"]["temperature"] == 1.0 and warmer["val_kwargs"]["temperature"] == 0.6


def test_cpu_device_plan(ws) -> None:
    """VERL_DEVICE=cpu: one machine's Ray on 127.0.0.2 with logical GPUs and CPUs declared, and rlkit's CPU
    platform and rollout named to every process of the run."""
    plan = build_plan(resolve(ws.config(**COMBOS["grpo-sync-cpu"]), ws.environ()))
    assert plan.head_address == "127.0.0.2" and "--node-ip-address=127.0.0.2" in plan.ray_head.argv
    assert "--num-gpus=1" in plan.ray_head.argv and any(a.startswith("--num-cpus=") for a in plan.ray_head.argv)
    for command in (plan.ray_head, plan.trainer):
        assert command.env["VERL_PLATFORM"] == "cpu"
        assert command.env["VERL_USE_EXTERNAL_MODULES"] == "rlkit.train.verl_cpu"
        assert command.env["RLKIT_VERL_CPU_LOG_DIR"] == str(ws.root / "out" / "logs")
    for command in (plan.ray_head, plan.ray_worker, plan.trainer):  # no pool of workers that verl never uses
        assert command.env["RAY_prestart_worker_first_driver"] == "0"
    overrides = dict(o.split("=", 1) for o in plan.overrides)
    assert overrides["actor_rollout_ref.rollout.name"] == "vllm_http"
    assert overrides["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    gpu = overrides_of(ws, "grpo-sync-fsdp")
    assert gpu["actor_rollout_ref.rollout.name"] == "vllm" and "trainer.device" not in gpu
    assert "VERL_PLATFORM" not in build_plan(resolve(ws.config(), ws.environ())).trainer.env


@pytest.mark.slow
def test_dry_run_command_is_accepted_by_verl_main_ppo(ws) -> None:
    """The exact trainer line DRY_RUN prints, fed to `python -m verl.trainer.main_ppo --cfg job --resolve`."""
    ws.write_site(RAY_HEAD_ADDRESS="127.0.0.1")  # three nodes need a head address (cluster_topology)
    cfg = ws.config(**COMBOS["gspo-async-veomni"])
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "DRY_RUN": "1", **ws.environ()}
    proc = subprocess.run(["bash", "scripts/train/train.sh", str(cfg)], capture_output=True, text=True, cwd=REPO,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ray start --head" in proc.stdout and "# Rollout / vLLM" in proc.stdout
    trainer = proc.stdout.split("# Trainer (rank 0)\n", 1)[1]
    argv = shlex.split(trainer.replace("\\\n", " "))
    start = argv.index("-m") - 1
    assert Path(argv[start]).is_absolute() and argv[start + 1:start + 3] == ["-m", "verl.trainer.main_ppo"]
    verl = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "--cfg", "job", "--resolve",
                           *argv[start + 3:]], capture_output=True, text=True, check=False)
    assert verl.returncode == 0, verl.stderr[-2000:]
    assert "trainer_mode: separate_async" in verl.stdout and "loss_mode: gspo" in verl.stdout


def test_trainer_env_carries_the_real_wandb_key_and_the_render_masks_it(tmp_path) -> None:
    """A key set in site.env must reach the trainer process; the printed plan never shows it."""
    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan

    secret = "wandb-secret-0123456789abcdef"
    cfg = tmp_path / "run.env"
    cfg.write_text("PROJECT_NAME=p\nEXP_NAME=e\nLOGGER=console,wandb\nGPUS_PER_NODE=1\nNNODES=1\n"
                   f"WANDB_API_KEY={secret}\n")
    plan = build_plan(resolve(cfg))
    assert plan.trainer.env["WANDB_API_KEY"] == secret
    assert secret not in plan.render()


def test_a_one_machine_ray_takes_free_ports_and_a_cluster_head_keeps_ray_port(ws) -> None:
    """Two one-machine runs' Rays never meet on RAY_PORT (nor Ray's other fixed defaults); the lock records
    the ports. A cluster head keeps RAY_PORT, the port its workers are told."""
    import socket

    from rlkit.launch.cluster import ray_ports

    port = ws.site_values["RAY_PORT"]
    plan = build_plan(resolve(ws.config(**COMBOS["grpo-sync-cpu"]), ws.environ()))
    given = ray_ports(plan)
    assert set(given["ports"]) == {"port", "ray-client-server-port", "dashboard-port", "dashboard-agent-listen-port"}
    assert len(set(given["ports"].values())) == 4 and port not in given["ports"].values()
    assert not {6379, 10001, 8265, 52365} & set(given["ports"].values())
    assert given["gcs"] == f"127.0.0.2:{head_port(plan)}" and plan.trainer.env["RAY_ADDRESS"] == given["gcs"]
    for p in given["ports"].values():  # free when planned
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", p))
    ws.write_site(RAY_HEAD_ADDRESS="10.1.2.3")
    head = build_plan(resolve(ws.config(), ws.environ()), ips={"10.1.2.3"})
    assert ray_ports(head)["ports"] == {"port": port} and head_port(head) == port
    assert f"--address=10.1.2.3:{port}" in head.ray_worker.argv
