"""Warm start: supervised fine-tuning on teacher trajectories, cached by what it depends on.

A random policy never solves a task, so RL has no signal. `ensure_sft_model` records one
teacher trajectory per train task through the real scaffold and proxy (`_record`), then
fine-tunes the policy on those token sequences with the RL loss's own mask (loss only
where `response_mask` is 1: tokens the model would have sampled; prompts, tool output
and terminal screens are context only). The result is an HF directory vLLM can serve.

It is cached under `<root>/sft-<key>/`, the key hashing the task set's files, the base
model's files, the settings and the teacher's version, so the second call returns at once; given
`shared` (the CLI passes `warm_starts_dir()`), a copy is kept there too, so a fresh clone of the
same tasks, base model and settings copies it instead of fine-tuning again.
The model is kept short of memorising: training stops once the chance of replaying the teacher's tokens exactly at
temperature 1 (exp of minus the summed masked loss), averaged over the tasks, reaches
`target_replay` (0.5), so the starting pass rate sits between 0 and 1 and RL has room to
climb. On the embedded tiny model and the bundled train tasks (then 3 teacher trajectories per
task, before decoys) that took 19 epochs at lr 3e-3 on 2 CPU cores (~19 min on a busy machine) and gave a
starting pass@1 of 0.39; a model twice as wide and deep, or other learning rates, took as
many epochs or more.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlkit.config.paths import machine_cache_dir
from rlkit.errors import UserError
from rlkit.rollout.records import TrialRecord

MARKER = "rlkit_sft.json"
_WEIGHT_FILES = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
                 "rlkit_tiny.json", MARKER}


class SftSettings(BaseModel):
    """What the fine-tune does (part of the cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int = Field(default=100, ge=1, description="most passes over the fully trained tasks' trajectories")
    target_replay: float = Field(default=0.5, gt=0, le=1.0,
                                 description="stop once exp(-summed masked loss), the chance of sampling the "
                                             "teacher's tokens at temperature 1, averages this over the tasks")
    lr: float = Field(default=3e-3, gt=0, description="AdamW learning rate")
    task_fraction: float = Field(default=1.0, gt=0, le=1.0,
                                 description="share of tasks trained `epochs` times; the others once")
    weight_decay: float = 0.0
    teacher_samples: int = Field(default=4, ge=1, description="teacher trajectories recorded per task (one per "
                                 "fix: the bundled train tasks have the oracle and three decoys)")
    decoys: bool = Field(default=True, description="also teach each task's solution/decoys/*.sh (plausible fixes "
                         "that fail its tests), one trial each in turn with the oracle: the policy then knows "
                         "every candidate and not which pays, so sampling alone cannot reach RL's pass rate")
    seed: int = 0
    scaffold: str = "terminus"
    max_turns: int = 4
    max_prompt: int = 4096   # MAX_PROMPT of the embedded config: rows are cut as the RL batch cuts them
    max_response: int = 8192  # MAX_RESP


class SftResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_dir: Path
    cached: bool
    record_s: float = 0.0
    finetune_s: float = 0.0
    losses: list[float] = Field(default_factory=list, description="mean masked loss per epoch")
    teacher_rewards: dict[str, float] = Field(default_factory=dict)
    copied_from: Path | None = Field(default=None, description="the machine cache's copy this one was taken from")


# --- which tasks, and the cache key ----------------------------------------------------------

def train_task_dirs(tasks: str | Path, *, val_fraction: float | None = None, seed: int = 0) -> list[Path]:
    """Train tasks from a task index (.parquet: its train rows) or a tasks directory (the train part of
    the seeded split `val_fraction` makes, the same as `rlkit index build --val-fraction`; 0 teaches every
    task); only tasks with an oracle solution can be taught. A directory without `val_fraction` is
    refused: its val tasks would be taught, and validation would then measure memory."""
    from rlkit.tasks.index import build_rows, load_index

    path = Path(tasks)
    if path.suffix == ".parquet":
        rows = [r for r in load_index(path) if r.split == "train"]
    else:
        if val_fraction is None:
            raise UserError(f"{path} is a tasks directory: without a split the warm start would teach the "
                            "validation tasks too", key="val_fraction", file=str(path),
                            fix="pass --val-fraction F (the split of `rlkit index build --val-fraction F`), "
                                "a train index (--tasks train.parquet), or --val-fraction 0 to teach every task")
        rows = build_rows(path, "train", val_fraction=val_fraction, seed=seed)
    dirs = [Path(r.task_source) for r in rows if not r.is_git]
    dirs = [d for d in dirs if (d / "solution" / "solve.sh").is_file()]
    if not dirs:
        raise UserError(f"no local train task with solution/solve.sh under {path}", file=str(path),
                        fix="point --tasks at a tasks directory or index whose train tasks have solution/solve.sh")
    return sorted(dirs, key=lambda d: d.name)


def _hash_files(digest: Any, root: Path, files: Iterable[Path]) -> None:
    for file in sorted(files):
        digest.update(str(file.relative_to(root)).encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")


def task_set_hash(task_dirs: list[Path]) -> str:
    digest = hashlib.sha256()
    for task_dir in sorted(task_dirs, key=lambda d: d.name):
        digest.update(task_dir.name.encode() + b"\0")
        _hash_files(digest, task_dir, (p for p in task_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts))
    return digest.hexdigest()


def model_hash(model_dir: Path) -> str:
    digest = hashlib.sha256()
    _hash_files(digest, model_dir, (p for p in model_dir.iterdir() if p.is_file() and p.name != MARKER))
    return digest.hexdigest()


def cache_key(task_dirs: list[Path], model_dir: Path, settings: SftSettings) -> str:
    from rlkit.train._teacher import TEACHER_VERSION

    digest = hashlib.sha256()
    for part in (task_set_hash(task_dirs), model_hash(model_dir), settings.model_dump_json(),
                 f"teacher {TEACHER_VERSION}"):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


# --- the fine-tune -------------------------------------------------------------------------

def taught_records(records: list[TrialRecord], *, decoys: bool) -> list[TrialRecord]:
    """The teacher trajectories to imitate: the passing ones, and with `decoys` also those that ran their
    fix to the end and failed the tests (the decoys; never a trial the agent or sandbox broke)."""
    from rlkit.rollout.records import Outcome

    return [r for r in records if r.trainable
            and (r.reward >= 1.0 or (decoys and r.outcome is Outcome.FAILED_TESTS))]


def decoy_problems(records: list[TrialRecord], fixes: dict[str, int], samples: int) -> list[str]:
    """Tasks whose teacher trials passed more often than their oracle's share: a decoy that passes its
    tests is no decoy (the policy would learn two right answers, and a lower temperature finds one)."""
    problems = []
    for task, count in sorted(fixes.items()):
        if count < 2:
            continue
        passed = sum(1 for r in records if r.task_id == task and r.reward >= 1.0)
        oracle_trials = -(-samples // count)  # trial i takes fix i mod count: the oracle's share, rounded up
        if passed > oracle_trials:
            problems.append(f"{task}: {passed} of {samples} teacher trials passed, but only {oracle_trials} ran "
                            f"the oracle: a decoy in solution/decoys/ passes the tests")
    return problems


def training_batch(records: list[TrialRecord], *, max_prompt: int, max_response: int, pad_id: int) -> Any:
    """The taught teacher trajectories as the RL trainer's batch (`rlkit.train.batch`): one row per
    segment, `response_mask` 1 only on tokens the model produced."""
    from rlkit.train.batch import build_batch

    return build_batch(records, max_prompt=max_prompt, max_response=max_response, pad_id=pad_id)


def masked_nats(model: Any, batch: Any) -> tuple[Any, Any]:
    """(token-mean loss, per-row summed loss) of the batch's responses where `response_mask` is 1.

    Prompts, tool output and terminal screens inserted between calls carry no loss. A row's
    summed loss is minus the log-probability of sampling its model tokens exactly, so
    exp(-sum) is the chance that sampling at temperature 1 replays the teacher."""
    import torch

    width = batch.prompt_width
    hidden = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                         position_ids=batch.position_ids).last_hidden_state
    # hidden state t predicts token t + 1, so response token j is predicted at width - 1 + j. The LM
    # head and the softmax run on the masked tokens only (~45% of a teacher trajectory's response:
    # tool output and screens carry no loss), the same sum as masking a loss over every position.
    rows, cols = (batch.response_mask > 0).nonzero(as_tuple=True)
    logits = model.lm_head(hidden[rows, width - 1 + cols]).float()
    losses = torch.nn.functional.cross_entropy(logits, batch.responses[rows, cols], reduction="none")
    losses = losses * batch.response_mask[rows, cols]
    per_row = torch.zeros(batch.responses.shape[0], dtype=losses.dtype, device=losses.device).index_add(0, rows, losses)
    return per_row.sum() / batch.response_mask.sum().clamp(min=1.0), per_row


def finetune(records: list[TrialRecord], base_dir: Path, out_dir: Path, settings: SftSettings,
             log: Callable[[str], None] = print, device: str = "cpu",
             fixes: dict[str, int] | None = None) -> list[float]:
    """Fine-tune `base_dir` on the records' masked tokens; save an HF dir to `out_dir`. Mean loss per epoch.

    Stops early once the replay chance, averaged over the tasks, reaches `settings.target_replay`: past
    that the model memorises and RL has nothing left to climb. A task's replay chance is the chance of
    sampling one of its `fixes[task]` taught fixes exactly at temperature 1: their count times exp of
    minus the task's mean summed loss (the fixes share all but a few tokens, so each one's chance is
    about the same)."""
    import collections
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pad_id = AutoTokenizer.from_pretrained(str(base_dir)).pad_token_id or 0
    taught = taught_records(records, decoys=settings.decoys)
    batch = training_batch(taught, max_prompt=settings.max_prompt, max_response=settings.max_response,
                           pad_id=pad_id)
    if batch.rows == 0:
        raise UserError("no teacher trajectory passed its tests: nothing to fine-tune on",
                        fix="check the tasks' solution/solve.sh with `rlkit trial TASK --agent oracle`")
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tasks = sorted(set(batch.uid.tolist()))
    full = set(rng.sample(tasks, max(1, round(len(tasks) * settings.task_fraction))))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).to(device)
    batch = batch.to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    losses = []
    for epoch in range(settings.epochs):
        rows = [i for i in range(batch.rows) if batch.uid[i] in full or epoch == 0]
        rng.shuffle(rows)
        total, nats = 0.0, dict.fromkeys(tasks, 0.0)
        for row in rows:
            loss, row_nats = masked_nats(model, batch.select([row]))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += float(loss.detach())
            nats[batch.uid[row]] += float(row_nats.detach().sum())
        losses.append(total / len(rows))
        per_task = collections.Counter(batch.uid[i] for i in rows)
        replay = sum(min(1.0, (fixes or {}).get(t, 1) * math.exp(-nats[t] / per_task[t])) for t in full) / len(full)
        log(f"  epoch {epoch + 1}/{settings.epochs}: masked loss {losses[-1]:.4f}, "
            f"replay chance {replay:.2f} ({len(rows)} sequences)")
        if replay >= settings.target_replay:
            break
    save_model(model.cpu(), base_dir, out_dir)
    return losses


def save_model(model: Any, base_dir: Path, out_dir: Path) -> None:
    """Weights and config from the model; tokenizer and chat template copied from the base dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    for file in base_dir.iterdir():
        if file.is_file() and file.name not in _WEIGHT_FILES and not file.name.endswith(".safetensors"):
            shutil.copy2(file, out_dir / file.name)


# --- the cached entry point ----------------------------------------------------------------

def ensure_sft_model(base_model: str | Path, tasks: str | Path, *, root: str | Path = ".rlkit/models",
                     settings: SftSettings | None = None, val_fraction: float | None = None,
                     out_dir: str | Path | None = None, shared: Path | None = None,
                     log: Callable[[str], None] = print) -> SftResult:
    """The warm-started policy for these tasks: from the cache (`out`, else `shared`'s copy), or recorded
    and fine-tuned now (and a copy kept in `shared`)."""
    from rlkit.train._record import record_teacher, write_records

    settings = settings or SftSettings()
    base = Path(base_model).resolve()
    if not (base / "config.json").is_file():
        raise UserError(f"{base} is not an HF model directory (no config.json)", key="MODEL_PATH",
                        fix="build the embedded policy with `rlkit model tiny DIR` or point at an HF model dir")
    task_dirs = train_task_dirs(tasks, val_fraction=val_fraction)
    key = cache_key(task_dirs, base, settings)
    out = Path(out_dir) if out_dir is not None else Path(root) / f"sft-{key}"
    kept = shared / f"sft-{key}" if shared is not None else None
    copied = None
    if not _built(out, key) and kept is not None and _built(kept, key) and _copy_model(kept, out):
        copied = kept
    if _built(out, key):
        _keep(out, kept, key, log)
        meta = json.loads((out / MARKER).read_text())
        return SftResult(model_dir=out, cached=True, losses=meta.get("losses", []),
                         teacher_rewards=meta.get("teacher_rewards", {}), copied_from=copied)

    # one scratch dir per process: two runs building the same model never share files
    _remove_dead_partials(out)
    work = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    log(f"warm start: recording {len(task_dirs)} teacher trajectories ({settings.scaffold})")
    started = time.monotonic()
    from rlkit.train._teacher import task_fixes

    fixes = {d.name: len(task_fixes(d, decoys=settings.decoys)) for d in task_dirs}
    records = record_teacher(task_dirs, base, work / "trials", scaffold=settings.scaffold,
                             samples=settings.teacher_samples, max_turns=settings.max_turns,
                             decoys=settings.decoys, log=log)
    record_s = time.monotonic() - started
    write_records(records, work / "teacher_records.jsonl")
    for problem in decoy_problems(records, fixes, settings.teacher_samples):
        log(f"⚠ warm start: {problem}")
    log(f"warm start: fine-tuning {base.name} ({settings.epochs} epochs, lr {settings.lr:g})")
    started = time.monotonic()
    losses = finetune(records, base, work, settings, log=log, fixes=fixes)
    finetune_s = time.monotonic() - started
    # the oracle's reward per task (the best of its trials: with decoys, the others fail by design)
    rewards = {t: max(r.reward for r in records if r.task_id == t) for t in sorted({r.task_id for r in records})}
    meta = {"key": key, "base_model": str(base), "tasks": [d.name for d in task_dirs],
            "settings": settings.model_dump(), "losses": losses, "teacher_rewards": rewards,
            "record_s": round(record_s, 1), "finetune_s": round(finetune_s, 1)}
    (work / MARKER).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    try:
        work.rename(out)
    except OSError:  # another run finished the same model first: keep its copy
        shutil.rmtree(work, ignore_errors=True)
    _keep(out, kept, key, log)
    return SftResult(model_dir=out, cached=False, record_s=record_s, finetune_s=finetune_s, losses=losses,
                     teacher_rewards=rewards)


def warm_starts_dir() -> Path:
    """Warm starts built on this machine, for every clone of it: <machine cache>/warm-starts. Keyed by content
    (`cache_key`), so a copy is only ever the same model."""
    return machine_cache_dir() / "warm-starts"


def _built(folder: Path, key: str) -> bool:
    try:
        return json.loads((folder / MARKER).read_text()).get("key") == key
    except (OSError, ValueError):
        return False


def _copy_model(src: Path, dst: Path) -> bool:
    """`src` (less its teacher trials: logs, not weights) to `dst` through a scratch folder and a rename, so
    no reader sees half a model; False where it could not (a full disk, a read-only cache)."""
    work = dst.with_name(f"{dst.name}.partial-{os.getpid()}")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work, ignore=shutil.ignore_patterns("trials"))
        shutil.rmtree(dst, ignore_errors=True)
        work.rename(dst)
        return True
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        return False


def _keep(out: Path, kept: Path | None, key: str, log: Callable[[str], None]) -> None:
    """A copy for the machine's other clones, where it has none yet (a clone built before there was one too)."""
    if kept is not None and not _built(kept, key) and not _copy_model(out, kept):
        log(f"⚠ warm start: could not keep a copy in {kept} (the next clone fine-tunes again)")


def _remove_dead_partials(out: Path) -> None:
    """Scratch dirs of runs that died (killed mid fine-tune) next to `out`."""
    import psutil

    for partial in out.parent.glob(f"{out.name}.partial-*"):
        pid = partial.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(partial, ignore_errors=True)
