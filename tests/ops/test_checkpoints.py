"""`rlkit ckpt merge|prune` on checkpoint folders written by the embedded trainer's own checkpoint code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _rlkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)


@pytest.fixture(scope="module")
def run_ckpts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """Three saved steps (1, 2, 3) of a tiny PolicyUpdater, as the embedded trainer saves them."""
    from rlkit.train.checkpoint import save_checkpoint
    from tests.train.test_checkpoint import trained

    updater = trained(tiny_model_dir, steps=1)
    root = tmp_path_factory.mktemp("ckpt") / "checkpoints" / "proj" / "exp"
    for step in (1, 2, 3):
        save_checkpoint(root, step, updater, {"step": step})
    return root, updater


def test_merge_a_run_folder_rebuilds_the_trainers_weights(run_ckpts, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    root, updater = run_ckpts
    out = tmp_path / "merged"
    done = _rlkit("ckpt", "merge", str(root), "-o", str(out))  # the run folder: its latest step
    assert done.returncode == 0, done.stderr
    assert f"merging {root / 'global_step_3' / 'actor'}" in done.stdout and f"merged model: {out}" in done.stdout
    merged = {}
    for file in out.glob("*.safetensors"):
        merged.update(load_file(file))
    trainer = updater.full_state_dict()
    assert set(merged) == set(trainer)
    for key, value in trainer.items():
        torch.testing.assert_close(merged[key], value.to(torch.bfloat16), rtol=0, atol=0, msg=key)
    assert "weights in bfloat16 (verl's merger; --keep-dtype keeps the checkpoint's own)" in done.stdout


def test_merge_keep_dtype_writes_the_float32_policy_that_trained_not_verls_bf16(run_ckpts, tmp_path: Path) -> None:
    """The embedded run trains and serves float32; verl's merger rounds to bf16, which changed greedy choices
    of a trained policy. --keep-dtype: every weight bit for bit as the trainer holds it, config.json says so."""
    import json

    import torch
    from safetensors.torch import load_file

    root, updater = run_ckpts
    out = tmp_path / "kept"
    done = _rlkit("ckpt", "merge", str(root), "-o", str(out), "--keep-dtype")
    assert done.returncode == 0, done.stderr
    assert "rlkit.ops._merge_dtype" in done.stdout and "weights in float32" in done.stdout
    merged = {}
    for file in out.glob("*.safetensors"):
        merged.update(load_file(file))
    trainer = updater.full_state_dict()
    assert set(merged) == set(trainer)
    rounded = 0
    for key, value in trainer.items():
        assert merged[key].dtype == torch.float32 and torch.equal(merged[key], value), key
        rounded += int(not torch.equal(value.to(torch.bfloat16).float(), value))
    assert rounded == len(trainer)  # bf16 would have changed every tensor
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert (out / "tokenizer.json").is_file()  # the rest is verl's merger's folder


def _save_two_rank_shards(rank: int, actor: str, port: int, full: dict) -> None:
    """One rank of a 2-rank gloo group on loopback: FSDP2's layout, each weight a DTensor sharded on dim 0."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
        state = {k: DTensor.from_local(v.chunk(2, dim=0)[rank].clone(), mesh, [Shard(0)]) for k, v in full.items()}
        torch.save(state, f"{actor}/model_world_size_2_rank_{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_keep_dtype_merges_two_ranks_dtensor_shards_with_verls_placement_merge(tiny_model_dir: Path,
                                                                               tmp_path: Path) -> None:
    """A checkpoint of two FSDP2 ranks (real DTensors from a gloo group on 127.0.0.1): the kept-dtype weights are
    the full float32 tensors, the shards put back together along their placement."""
    import json
    import shutil
    import socket

    import torch
    import torch.multiprocessing as mp
    from safetensors.torch import load_file, save_file

    from rlkit.ops._merge_dtype import rewrite

    torch.manual_seed(0)
    full = {"model.embed_tokens.weight": torch.randn(8, 4), "lm_head.weight": torch.randn(6, 4) + 2 ** -10}
    actor = tmp_path / "global_step_1" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    shutil.copy(tiny_model_dir / "config.json", actor / "huggingface" / "config.json")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.start_processes(_save_two_rank_shards, args=(str(actor), port, full), nprocs=2, start_method="spawn")
    target = tmp_path / "merged"
    target.mkdir()
    save_file({k: v.bfloat16() for k, v in full.items()}, str(target / "model.safetensors"))  # as verl's merger
    (target / "config.json").write_text(json.dumps({"dtype": "bfloat16", "model_type": "qwen3"}))
    assert rewrite(actor, target) == "float32"
    merged = load_file(str(target / "model.safetensors"))
    assert all(torch.equal(merged[k], v) for k, v in full.items())
    assert json.loads((target / "config.json").read_text())["dtype"] == "float32"


def test_merge_refuses_an_incomplete_checkpoint(run_ckpts, tmp_path: Path) -> None:
    import shutil

    root, _ = run_ckpts
    broken = tmp_path / "global_step_9"
    shutil.copytree(root / "global_step_1", broken)
    (broken / "actor" / "model_world_size_1_rank_0.pt").unlink()
    done = _rlkit("ckpt", "merge", str(broken))
    assert done.returncode == 2 and "missing model shard(s) model_world_size_1_rank_0.pt" in done.stderr
    done = _rlkit("ckpt", "merge", str(tmp_path / "nope"))
    assert done.returncode == 2 and "no such checkpoint" in done.stderr


def test_prune_previews_then_deletes_optimizer_shards_and_keeps_the_latest(run_ckpts) -> None:
    root, _ = run_ckpts
    optim = {s: root / f"global_step_{s}" / "actor" / "optim_world_size_1_rank_0.pt" for s in (1, 2, 3)}
    size = optim[1].stat().st_size
    preview = _rlkit("ckpt", "prune", str(root))
    assert preview.returncode == 0, preview.stderr
    assert preview.stdout.count("would delete") == 2 and all(p.is_file() for p in optim.values())
    assert "kept global_step_3 whole" in preview.stdout

    done = _rlkit("ckpt", "prune", str(root), "--yes")
    assert done.returncode == 0, done.stderr
    assert not optim[1].exists() and not optim[2].exists() and optim[3].is_file()
    from rlkit.ops.checkpoints import human

    assert f"freed {human(2 * size)}" in done.stdout
    for step in (1, 2, 3):  # the model and its config stay: every step still merges
        actor = root / f"global_step_{step}" / "actor"
        assert (actor / "model_world_size_1_rank_0.pt").is_file() and (actor / "huggingface" / "config.json").is_file()
    assert _rlkit("ckpt", "prune", str(root), "--yes").stdout.splitlines()[-1] == "nothing to prune"
