"""Checkpoint chores on verl's FSDP layout (rlkit.train.checkpoint writes the same):

    <ckpt root>/latest_checkpointed_iteration.txt
    <ckpt root>/global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt, fsdp_config.json, huggingface/

merge: verl's own merger (`python -m verl.model_merger merge --backend fsdp`) after checking the
input is a complete actor folder; it writes bf16, and `keep_dtype` rewrites the weights in the dtype the
shards hold (`_merge_dtype`: a float32-trained policy is otherwise not the one that was validated). prune: optimizer shards are most of a checkpoint's size and
needed only to resume; model shards and huggingface/ stay, and the latest checkpoint (the one a
resume reads) is kept whole unless asked. No torch here: files only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.files import FileReadError, read_int
from rlkit.config.model_files import read_world_size
from rlkit.errors import UserError

TRACKER = "latest_checkpointed_iteration.txt"
_STEP = re.compile(r"^global_step_(\d+)$")
_SHARD = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")


def steps(root: Path) -> dict[int, Path]:
    """{N: global_step_N} under a checkpoint root."""
    found = {}
    for entry in root.iterdir() if root.is_dir() else ():
        match = _STEP.match(entry.name)
        if match and entry.is_dir():
            found[int(match.group(1))] = entry
    return dict(sorted(found.items()))


def latest_step(root: Path) -> int | None:
    """The tracker's step (what a resume reads), else the highest global_step_N."""
    try:
        return read_int(root / TRACKER)
    except FileReadError:
        found = steps(root)
        return max(found) if found else None


def actor_dir(path: Path) -> Path:
    """The actor folder a merge reads, from a checkpoint root (its latest step), a global_step_N, or the actor."""
    path = path.expanduser()
    if not path.exists():
        raise UserError(f"no such checkpoint: {path}", fix="point at checkpoints/<project>/<exp>/global_step_N")
    if (path / "fsdp_config.json").is_file() or _STEP.match(path.parent.name):
        actor = path
    elif _STEP.match(path.name):
        actor = path / "actor"
    else:
        step = latest_step(path)
        if step is None:
            raise UserError(f"{path} holds no global_step_N folder", fix="point at a run's checkpoint folder")
        actor = path / f"global_step_{step}" / "actor"
    _validate_actor(actor)
    return actor


def _validate_actor(actor: Path) -> None:
    fix = "pick a checkpoint that finished saving (its step is in latest_checkpointed_iteration.txt)"
    try:
        world = read_world_size(actor)
    except FileReadError as exc:
        raise UserError(f"{actor}: no readable fsdp_config.json ({exc.reason})", fix=fix) from None
    missing = [f"model_world_size_{world}_rank_{r}.pt" for r in range(world)
               if not (actor / f"model_world_size_{world}_rank_{r}.pt").is_file()]
    if missing:
        raise UserError(f"{actor}: missing model shard(s) {', '.join(missing[:4])}", fix=fix)
    if not (actor / "huggingface" / "config.json").is_file():
        raise UserError(f"{actor}: no huggingface/config.json (the merger needs the model's config)", fix=fix)


def merge_command(actor: Path, target: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
            "--target_dir", str(target)]


def default_target(actor: Path) -> Path:
    return actor.parent / "merged_hf"


def keep_dtype_command(actor: Path, target: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "rlkit.ops._merge_dtype", str(actor), str(target)]


def merge(path: Path, target: Path | None = None, *, python: str = sys.executable, keep_dtype: bool = False) -> Path:
    """Merge a checkpoint into a Hugging Face model folder; returns that folder. verl's merger writes bf16;
    `keep_dtype` then rewrites its weights in the shards' own dtype."""
    actor = actor_dir(path)
    target = (target or default_target(actor)).expanduser()
    commands = [merge_command(actor, target, python)] + ([keep_dtype_command(actor, target, python)] if keep_dtype else [])
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (target / "config.json").is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise UserError(f"{' '.join(command[1:3])} failed on {actor} (exit {done.returncode}):\n{tail}",
                            fix="run the command by hand to see all of it: " + " ".join(command))
    return target


def weights_dtype(target: Path) -> str:
    """The dtype a merged folder's config.json names (verl's merger: bfloat16)."""
    try:
        config = json.loads((target / "config.json").read_text())
    except (OSError, ValueError):
        return "unknown"
    return str(config.get("dtype") or config.get("torch_dtype") or "unknown")


@dataclass
class MergeResult:
    """A merged checkpoint: the actor folder read, the Hugging Face folder written, verl's command, and the
    dtype of the weights written (bfloat16 from verl's merger unless the checkpoint's own was kept)."""

    actor: Path
    target: Path
    command: list[str]
    dtype: str = "bfloat16"

    def as_dict(self) -> dict[str, object]:
        return {"actor": str(self.actor), "target": str(self.target), "command": self.command, "dtype": self.dtype}


def merge_checkpoint(path: Path, target: Path | None = None, *, python: str = sys.executable,
                     keep_dtype: bool = False) -> MergeResult:
    """`merge`, answering what was merged from where (`rlkit ckpt merge`, `rlkit.ckpt_merge`)."""
    actor = actor_dir(Path(path))
    target = (Path(target) if target else default_target(actor)).expanduser()
    merged = merge(actor, target, python=python, keep_dtype=keep_dtype)
    return MergeResult(actor, merged, merge_command(actor, target, python), weights_dtype(merged))


@dataclass
class PrunePlan:
    root: Path
    shards: list[Path]
    kept_latest: int | None  # the step left whole
    sizes: list[int] = field(default_factory=list)  # bytes of each shard when planned
    deleted: bool = False  # prune() ran on it
    freed: int = 0  # bytes prune() freed

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.shards if p.exists())

    def as_dict(self) -> dict[str, object]:
        """`rlkit ckpt prune --json`: the optimizer shards (and sizes) that go, or went."""
        shards = [{"path": str(p), "bytes": n} for p, n in zip(self.shards, self.sizes, strict=True)]
        return {"root": str(self.root), "shards": shards, "kept_latest": self.kept_latest, "deleted": self.deleted,
                "bytes": sum(self.sizes), "freed": self.freed}


def plan_prune(root: Path, *, include_latest: bool = False) -> PrunePlan:
    """Optimizer shards of every step but the latest (all of them with `include_latest`)."""
    root = root.expanduser()
    found = steps(root)
    if not found:
        raise UserError(f"{root} holds no global_step_N folder", fix="point at checkpoints/<project>/<exp>")
    latest = latest_step(root)
    shards = []
    for step, folder in found.items():
        if step == latest and not include_latest:
            continue
        for role in sorted(p for p in folder.iterdir() if p.is_dir()):
            shards += sorted(p for p in role.iterdir() if (m := _SHARD.match(p.name)) and m.group(1) == "optim")
    return PrunePlan(root, shards, None if include_latest else latest, sizes=[p.stat().st_size for p in shards])


def prune(plan: PrunePlan) -> int:
    """Delete the plan's shards; returns bytes freed (also kept on the plan)."""
    freed = 0
    for shard in plan.shards:
        try:
            size = shard.stat().st_size
            shard.unlink()
        except FileNotFoundError:
            continue
        freed += size
    plan.deleted, plan.freed = True, freed
    return freed


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"
