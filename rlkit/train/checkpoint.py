"""Checkpoints in verl's FSDP actor layout, so verl's model merger and rlkit's merge/prune read them.

    root/latest_checkpointed_iteration.txt          "N"
    root/global_step_N/data.pt                      the loop's extra state (sampler position, ...)
    root/global_step_N/actor/model_world_size_W_rank_R.pt     model state dict (HF keys; DTensor
                                                              shards under FSDP2, plain tensors on one rank)
    root/global_step_N/actor/optim_world_size_W_rank_R.pt     optimizer state
    root/global_step_N/actor/extra_state_world_size_W_rank_R.pt  {"global_step", "rng", "lr_scheduler"}
    root/global_step_N/actor/fsdp_config.json       {"FSDP_version": 2, "world_size": W}
    root/global_step_N/actor/huggingface/           config, generation config, tokenizer, chat template

`python -m verl.model_merger merge --backend fsdp --local_dir root/global_step_N/actor --target_dir OUT`
rebuilds the HF model (in bf16, as the merger always writes). The tracker file is written last,
so a save cut short is never picked up by `latest_checkpoint`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.config.files import FileReadError, read_int
from rlkit.config.model_files import read_world_size

if TYPE_CHECKING:
    from rlkit.train.policy import PolicyUpdater

TRACKER = "latest_checkpointed_iteration.txt"


def _barrier(updater: PolicyUpdater) -> None:
    if updater.world_size > 1:
        import torch.distributed as dist

        dist.barrier()


def _atomic_save(obj: Any, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(root: str | Path, step: int, updater: PolicyUpdater, extra_state: dict[str, Any]) -> Path:
    """Write global_step_<step> (every rank writes its shard; rank 0 the rest). Returns its path."""
    root = Path(root)
    step_dir = root / f"global_step_{step}"
    actor = step_dir / "actor"
    ws, rank = updater.world_size, updater.rank
    if rank == 0:
        if step_dir.exists():
            shutil.rmtree(step_dir)
        actor.mkdir(parents=True)
    _barrier(updater)
    state = updater.state_dict_for_checkpoint()
    suffix = f"world_size_{ws}_rank_{rank}.pt"
    _atomic_save(state["model"], actor / f"model_{suffix}")
    _atomic_save(state["optim"], actor / f"optim_{suffix}")
    _atomic_save({**state["extra"], "lr_scheduler": None}, actor / f"extra_state_{suffix}")
    updater.save_hf(actor / "huggingface")  # gathers on every rank, writes on rank 0
    if rank == 0:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": ws}, indent=2))
        _atomic_save(extra_state, step_dir / "data.pt")
    _barrier(updater)
    if rank == 0:
        tmp = root / (TRACKER + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, root / TRACKER)
    return step_dir


def latest_checkpoint(root: str | Path) -> tuple[int, Path] | None:
    """(step, global_step_N dir) named by the tracker file, if it and its actor shards exist."""
    root = Path(root)
    tracker = root / TRACKER
    try:
        step = read_int(tracker)
    except FileReadError:  # absent, or not a step number
        return None
    path = root / f"global_step_{step}"
    if not (path / "actor" / "fsdp_config.json").is_file():
        return None
    return step, path


def load_checkpoint(path: str | Path, updater: PolicyUpdater) -> dict[str, Any]:
    """Restore model, optimizer, step and RNG into `updater`; return the loop's extra state (data.pt)."""
    import torch

    path = Path(path)
    actor = path / "actor"
    saved_ws = read_world_size(actor)
    if saved_ws != updater.world_size:
        raise ValueError(f"checkpoint {path} was written by {saved_ws} ranks, this run has {updater.world_size}; "
                         f"merge it (python -m verl.model_merger) and start from the merged model instead")
    suffix = f"world_size_{saved_ws}_rank_{updater.rank}.pt"
    model = torch.load(actor / f"model_{suffix}", map_location="cpu", weights_only=False)
    optim = torch.load(actor / f"optim_{suffix}", map_location="cpu", weights_only=False)
    extra = torch.load(actor / f"extra_state_{suffix}", map_location="cpu", weights_only=False)
    updater.load_checkpoint_state(model, optim, extra)
    data = path / "data.pt"
    return torch.load(data, map_location="cpu", weights_only=False) if data.is_file() else {}
