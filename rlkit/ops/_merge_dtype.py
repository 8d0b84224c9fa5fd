"""`python -m rlkit.ops._merge_dtype ACTOR TARGET`: put the checkpoint's own dtype back into a folder verl's
merger wrote.

verl's merger casts every weight to bf16 as it reads the shards. A policy that trained and was served in
float32 (the embedded CPU run) is then not the policy that was validated: the rounding (up to 4e-3 on the
tiny policy) was as large as a 16-step RL update and changed greedy choices. This reads the shards again
with verl's own pieces (world size, device mesh, shard count, placement merge) but without the cast, and
rewrites each safetensors file the merger wrote with the same keys. It prints the dtype it wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def full_precision_state(actor: Path) -> dict:
    """The actor's merged state dict in the dtype its shards hold (verl's merge steps, no bf16 cast)."""
    import torch
    from torch.distributed.tensor import DTensor
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger, merge_non_dtensor_shards

    merger = FSDPModelMerger(ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor),
                                               hf_model_config_path=str(actor / "huggingface")))
    world_size = merger._get_world_size()
    rank0 = merger._load_rank_zero_state_dict(world_size)
    mesh, mesh_dim_names = merger._extract_device_mesh_info(rank0, world_size)
    total_shards, mesh_shape = merger._calculate_shard_configuration(mesh, mesh_dim_names)
    if len(mesh_shape) != 1:
        raise SystemExit("FSDP + TP checkpoints are not supported (verl's merger refuses them too)")
    states = [rank0] + [torch.load(actor / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu",
                                   weights_only=False) for rank in range(1, total_shards)]
    merged = {}
    for key in rank0:
        parts = [state[key] for state in states]
        if isinstance(parts[0], DTensor):
            placements = tuple(parts[0].placements)
            if mesh_dim_names[0] in ("dp", "ddp"):  # replicated over data parallel: one copy
                placements = placements[1:]
            merged[key] = merger._merge_by_placement([p._local_tensor for p in parts], placements[0])
        else:
            merged[key] = merge_non_dtensor_shards(key, parts)
    return merged


def rewrite(actor: Path, target: Path) -> str:
    """Each safetensors file of `target` again, same keys, from the actor's shards; config.json's dtype too."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    state = full_precision_state(actor)
    files = sorted(target.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{target}: no safetensors files to rewrite")
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys = list(handle.keys())
        missing = [k for k in keys if k not in state]
        if missing:
            raise SystemExit(f"{file}: {missing[:3]} not in the checkpoint's shards")
        tensors = {k: state[k].detach().contiguous() for k in keys}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file(tensors, str(file), metadata={"format": "pt"})
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in state.values() if t.is_floating_point()})
    dtype = dtypes[0] if len(dtypes) == 1 else "mixed"
    config = json.loads((target / "config.json").read_text())
    if dtype != "mixed":
        config["dtype"] = dtype
        if "torch_dtype" in config:
            config["torch_dtype"] = dtype
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    index = target / "model.safetensors.index.json"
    if index.is_file():  # sharded output: its total size grows with the dtype
        data = json.loads(index.read_text())
        data.setdefault("metadata", {})["total_size"] = total
        index.write_text(json.dumps(data, indent=2) + "\n")
    return dtype


if __name__ == "__main__":
    print(rewrite(Path(sys.argv[1]), Path(sys.argv[2])))
