"""Task index: build, write and load the parquet pointer table.

One row per task instance. Columns come from `rlkit.tasks.schema`: the pointer columns
(where the task lives, its image, split, difficulty, timeouts) and the verl columns, so
the same file is both rlkit's task list and verl's `data.train_files`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlkit.config.files import FileReadError, open_regular
from rlkit.errors import UserError
from rlkit.tasks.images import task_image_ref
from rlkit.tasks.schema import AGENT_LOOP_NAME, OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from rlkit.tasks.task import TaskInfo, discover_tasks

Split = Literal["train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")
DEFAULT_DATA_SOURCE = "rlkit_tasks"


class IndexRow(BaseModel):
    """One validated row of a task index (the pointer columns; verl columns are derived)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(min_length=1)
    task_source: str = Field(min_length=1)
    image: str = Field(min_length=1)
    split: Split
    task_commit: str | None = None
    pass_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    difficulty: str | None = None
    agent_timeout_sec: float | None = Field(default=None, gt=0)
    verifier_timeout_sec: float | None = Field(default=None, gt=0)
    instruction: str = ""
    data_source: str = DEFAULT_DATA_SOURCE
    agent_name: str = AGENT_LOOP_NAME

    @property
    def is_git(self) -> bool:
        return self.task_source.startswith(("http://", "https://", "git@", "ssh://", "git://"))


def _arrow_schema():
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema([
        ("task_id", pa.string()),
        ("task_source", pa.string()),
        ("image", pa.string()),
        ("split", pa.string()),
        ("task_commit", pa.string()),
        ("pass_rate", pa.float64()),
        ("difficulty", pa.string()),
        ("agent_timeout_sec", pa.float64()),
        ("verifier_timeout_sec", pa.float64()),
        ("data_source", pa.string()),
        ("prompt", pa.list_(message)),
        ("agent_name", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([("task_id", pa.string()), ("index", pa.int64()), ("split", pa.string())])),
    ])


def image_ref_for(task: TaskInfo, registry: str | None = None) -> str:
    """A task's sandbox image: its own docker_image, else the image `rlkit images build` makes."""
    if task.docker_image:
        return task.docker_image
    return task_image_ref(task.task_id, registry=registry)


def row_for_task(task: TaskInfo, split: Split, registry: str | None = None,
                 data_source: str = DEFAULT_DATA_SOURCE) -> IndexRow:
    return IndexRow(
        task_id=task.task_id, task_source=str(task.path), image=image_ref_for(task, registry), split=split,
        pass_rate=task.pass_rate, difficulty=task.difficulty, agent_timeout_sec=task.agent_timeout_sec,
        verifier_timeout_sec=task.verifier_timeout_sec, instruction=task.instruction, data_source=data_source,
    )


def split_tasks(tasks: Sequence[TaskInfo], val_fraction: float, seed: int) -> dict[str, list[TaskInfo]]:
    """Deterministic train/val split: the same (tasks, fraction, seed) always gives the same sets."""
    if not 0.0 <= val_fraction < 1.0:
        raise UserError(f"--val-fraction must be in [0, 1), got {val_fraction}", key="val_fraction",
                        fix="e.g. --val-fraction 0.2")
    ids = sorted(t.task_id for t in tasks)
    random.Random(f"rlkit-split:{seed}").shuffle(ids)
    n_val = round(len(ids) * val_fraction)
    if val_fraction > 0 and n_val == 0 and len(ids) > 1:
        n_val = 1  # a requested val split is never silently empty
    val_ids = set(ids[:n_val])
    return {
        "train": [t for t in tasks if t.task_id not in val_ids],
        "val": [t for t in tasks if t.task_id in val_ids],
    }


def build_rows(tasks_dir: str | Path, split: Split = "train", *, registry: str | None = None,
               val_fraction: float | None = None, seed: int = 0,
               data_source: str = DEFAULT_DATA_SOURCE) -> list[IndexRow]:
    """Rows for every task under `tasks_dir`; with `val_fraction`, only the `split` part of a seeded split."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}", key="split", fix=f"use one of {', '.join(SPLITS)}")
    tasks = discover_tasks(tasks_dir)
    if val_fraction is not None:
        if split == "test":
            raise UserError("--val-fraction splits into train and val only", key="split",
                            fix="use --split train or --split val with --val-fraction")
        tasks = split_tasks(tasks, val_fraction, seed)[split]
    return [row_for_task(t, split, registry, data_source) for t in tasks]


def _record(row: IndexRow, index: int) -> dict[str, Any]:
    record: dict[str, Any] = row.model_dump(exclude={"instruction"})
    record["prompt"] = [{"role": "user", "content": row.instruction}]
    record["reward_model"] = {"style": "rule", "ground_truth": ""}
    record["extra_info"] = {"task_id": row.task_id, "index": index, "split": row.split}
    return record


def write_index(rows: Iterable[IndexRow], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [_record(row, i) for i, row in enumerate(rows)]
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(records, schema=_arrow_schema())
    pq.write_table(table, out)
    return out


def build_index(tasks_dir: str | Path, output: str | Path, split: Split = "train", **kwargs: Any) -> list[IndexRow]:
    rows = build_rows(tasks_dir, split, **kwargs)
    write_index(rows, output)
    return rows


def load_index(path: str | Path) -> list[IndexRow]:
    """Read and validate an index; a problem raises UserError naming the file, row and column."""
    import pyarrow.parquet as pq

    file = Path(path).expanduser()
    try:
        handle = open_regular(file)  # a FIFO or a device never reaches pyarrow
    except FileReadError as exc:
        raise UserError(f"task index {exc.message}", file=str(file),
                        fix="build one: rlkit index build TASKS_DIR -o FILE.parquet") from None
    try:
        with handle:
            table = pq.read_table(handle)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise UserError(f"task index {file} is not a readable parquet file: {exc}", file=str(file),
                        fix="rebuild it with rlkit index build") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise UserError(f"task index {file} lacks column(s) {', '.join(missing)}", file=str(file),
                        key=missing[0], fix="rebuild it with rlkit index build")
    keep = [c for c in (*IndexRow.model_fields, "prompt") if c in table.column_names]
    rows: list[IndexRow] = []
    seen: set[str] = set()
    for i, record in enumerate(table.select(keep).to_pylist()):
        prompt = record.pop("prompt") or []
        record["instruction"] = next((m.get("content") or "" for m in prompt if m.get("role") == "user"), "")
        record = {k: v for k, v in record.items() if v is not None or k not in OPTIONAL_COLUMNS}
        try:
            row = IndexRow.model_validate(record)
        except ValidationError as exc:
            err = exc.errors()[0]
            column = ".".join(str(p) for p in err["loc"])
            raise UserError(f"task index {file} row {i}: {column}: {err['msg']}", file=str(file), key=column,
                            fix="rebuild it with rlkit index build, or fix that row") from exc
        if row.task_id in seen:
            raise UserError(f"task index {file} row {i}: task_id {row.task_id!r} appears twice", file=str(file),
                            key="task_id", fix="each task instance needs a unique task_id")
        seen.add(row.task_id)
        rows.append(row)
    if not rows:
        raise UserError(f"task index {file} has no rows", file=str(file), fix="build it from a non-empty tasks dir")
    return rows
