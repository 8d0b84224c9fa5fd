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
