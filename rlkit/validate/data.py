"""TRAIN_FILES / VAL_FILES: exist, are parquet, are non-empty, carry the task-index columns.

Only the parquet footer is read (schema and row count), never the rows, and without
pyarrow: its import alone would cost more than the rest of a preflight.
"""

from __future__ import annotations

from rlkit.config.files import FileReadError, exists, is_dir, os_reason, parse_json, validate_model
from rlkit.config.schema import Trainer
from rlkit.tasks.schema import REQUIRED_COLUMNS, TASK_CHECK_KEY, TaskCheckVerdict
from rlkit.validate._parquet_footer import ParquetFooterError, read_footer, read_key_values
from rlkit.validate.findings import Context, Finding, Status, fatal, ok, skip, warn

BUILD_FIX = "build it with `rlkit index build TASKS_DIR -o FILE.parquet`"


def index_rows(path: object) -> int | None:
    """The rows of a task index by its parquet footer; None when it cannot be read."""
    try:
        num_rows, _ = read_footer(str(path))
    except (ParquetFooterError, OSError, FileReadError):
        return None
    return num_rows


def _check_index(ctx: Context, name: str) -> Finding:
    where = ctx.resolved.where(name)
    path = ctx.resolved.path(name)
    if name in ctx.resolved.bad_keys:
        return skip("data_files", f"{name} is not usable (see config_syntax / changeme / types)")
    if path is None:
        return fatal("data_files", f"{name} is empty", f"set {name}; {BUILD_FIX}", key=name, where=where)
    if is_dir(path):
        return fatal("data_files", f"{name} {path} is a directory, not a task index file",
                     f"point {name} at the .parquet file inside it, or {BUILD_FIX}", key=name, where=where)
    if not exists(path):
        return fatal("data_files", f"{name} {path} does not exist", BUILD_FIX, key=name, where=where)
    try:
        num_rows, names = read_footer(str(path))
    except ParquetFooterError as exc:
        return fatal("data_files", f"{name} {path} is not a parquet file ({exc})", BUILD_FIX, key=name,
                     where=where)
    except OSError as exc:
        return fatal("data_files", f"{name} {path} {os_reason(exc)}", BUILD_FIX, key=name, where=where)
    if num_rows == 0:
        return fatal("data_files", f"{name} {path} has no rows", "rebuild the index from a non-empty task set",
                     key=name, where=where)
    columns = set(names)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        return fatal("data_files", f"{name} {path} lacks task-index column(s): {', '.join(missing)}",
                     f"rebuild it: {BUILD_FIX}", key=name, where=where)
    c = ctx.resolved.config
    if name == "TRAIN_FILES" and "TRAIN_BSZ" not in ctx.resolved.bad_keys and c.TRAIN_BSZ > num_rows:
        fix = f"lower TRAIN_BSZ to {num_rows} or less (and MINI_BSZ with it), or add tasks to the index"
        where = ctx.resolved.where("TRAIN_BSZ")
        if c.TRAINER is Trainer.VERL:  # verl's train dataloader drops the last partial batch
            return fatal("data_files", f"TRAIN_BSZ={c.TRAIN_BSZ} prompts a step, but {name} {path} holds "
                         f"{num_rows} task(s): not one full batch, so verl would run no step", fix,
                         key="TRAIN_BSZ", where=where)
        return warn("data_files", f"TRAIN_BSZ={c.TRAIN_BSZ} prompts a step, but {name} {path} holds {num_rows} "
                    "task(s): every step repeats tasks", fix, key="TRAIN_BSZ", where=where)
    return ok("data_files", f"{name}: {num_rows} task(s) in {path.name}")


def _broken_tasks(ctx: Context, name: str) -> Finding | None:
    """A warning when `rlkit tasks check --write-index` marked rows of the index task_ok false;
    metadata of another shape is a warning naming the index, never a crashed check."""
    path = ctx.resolved.path(name)
    rerun = f"run `rlkit tasks check {path} --write-index` again"
    try:
        raw = read_key_values(str(path)).get(TASK_CHECK_KEY)
        if raw is None:
            return None
        verdict = validate_model(parse_json(raw, f"{path} ({TASK_CHECK_KEY} metadata)"), TaskCheckVerdict,
                                 f"{path} ({TASK_CHECK_KEY} metadata)")
    except FileReadError as exc:
        return warn("data_files", f"{name}: {exc.message}", f"its rows are used as they are; {rerun}", key=name,
                    where=ctx.resolved.where(name))
    except (OSError, ParquetFooterError):
        return None  # _check_index read this footer a moment ago; a file that changed since is a race
    broken = verdict.broken
    if not broken:
        return None
    shown = "; ".join(f"{task}: {(reason.splitlines() or [''])[0]}" for task, reason in list(broken.items())[:3])
    more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
    return warn("data_files", f"{name}: {len(broken)} task(s) failed `rlkit tasks check` (task_ok false): "
                f"{shown}{more}",
                "their rewards teach nothing: fix them, or drop those rows, then run "
                f"`rlkit tasks check {path} --write-index` again", key=name, where=ctx.resolved.where(name))


def data_files(ctx: Context) -> list[Finding]:
    findings = []
    for name in ("TRAIN_FILES", "VAL_FILES"):
        finding = _check_index(ctx, name)
        findings.append(finding)
        if finding.status is Status.OK:
            findings.extend(f for f in [_broken_tasks(ctx, name)] if f is not None)
    return findings
