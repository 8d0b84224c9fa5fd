"""TRAIN_FILES / VAL_FILES: exist, are parquet, are non-empty, carry the task-index columns.

Only the parquet footer is read (schema and row count), never the rows, and without
pyarrow: its import alone would cost more than the rest of a preflight.
"""

from __future__ import annotations

from rlkit.config.files import exists, is_dir, os_reason
from rlkit.tasks.schema import REQUIRED_COLUMNS
from rlkit.validate._parquet_footer import ParquetFooterError, read_footer
from rlkit.validate.findings import Context, Finding, fatal, ok, skip

BUILD_FIX = "build it with `rlkit index build TASKS_DIR -o FILE.parquet`"


def _check_index(ctx: Context, name: str) -> Finding:
    where = ctx.resolved.where(name)
    path = ctx.resolved.path(name)
    if name in ctx.resolved.bad_keys:
        return skip("data_files", f"{name} is not set (see changeme / types)")
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
    return ok("data_files", f"{name}: {num_rows} task(s) in {path.name}")


def data_files(ctx: Context) -> list[Finding]:
    return [_check_index(ctx, "TRAIN_FILES"), _check_index(ctx, "VAL_FILES")]
