"""Columns of a task index: a parquet pointer table, one row per task instance.

The pointer columns say where a task lives and how to run it. The verl columns make
the same file directly loadable as verl's `data.train_files` / `data.val_files`
(one row = one prompt; the agent loop named by `agent_name` runs the trial).
Validation (`rlkit check`) and the index builder both read this module, so the
column list is declared once.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

# name -> one-line description. Required in every index.
POINTER_COLUMNS: dict[str, str] = {
    "task_id": "unique task instance id (harbor task name)",
    "task_source": "where the task lives: a local task directory, or a git url",
    "image": "sandbox image reference (registry/name:tag) the trial runs in",
    "split": "train | val | test",
}
# Optional pointer columns (null allowed).
OPTIONAL_COLUMNS: dict[str, str] = {
    "task_commit": "git commit of task_source when it is a git url",
    "pass_rate": "measured pass rate in [0, 1] (difficulty filters read it)",
    "difficulty": "free-form difficulty label (easy | medium | hard)",
    "agent_timeout_sec": "agent timeout for this task (task.toml [agent].timeout_sec)",
    "verifier_timeout_sec": "verifier timeout for this task (task.toml [verifier].timeout_sec)",
}
# Added to an index by `rlkit tasks check INDEX --write-index` (not by `rlkit index build`).
CHECK_COLUMNS: dict[str, str] = {
    "task_ok": "the task passed `rlkit tasks check` (oracle 1, no-op 0); false rows are broken (null: not checked)",
}
# Footer key-value metadata `rlkit tasks check --write-index` leaves: JSON {"checked": N,
# "broken": {task_id: reason}}; preflight reads it from the footer, without loading rows.
TASK_CHECK_KEY = "rlkit.task_check"


class TaskCheckVerdict(BaseModel):
    """The TASK_CHECK_KEY metadata: how many tasks `rlkit tasks check` ran, and the broken ones' reasons."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    checked: Annotated[StrictInt, Field(ge=0)] = 0
    broken: dict[Annotated[str, Field(max_length=1024)], Annotated[StrictStr, Field(max_length=65536)]] = Field(
        default_factory=dict)
# Required by verl's RLHFDataset + agent loop.
VERL_COLUMNS: dict[str, str] = {
    "data_source": "dataset name verl groups metrics by (val-core/<data_source>/...)",
    "prompt": "chat messages [{role, content}] holding the task instruction",
    "agent_name": "agent loop verl runs for this row",
    "reward_model": "{style: 'rule', ground_truth: ''} (reward comes from the verifier)",
    "extra_info": "{task_id, index, split}",
}
REQUIRED_COLUMNS: tuple[str, ...] = (*POINTER_COLUMNS, *VERL_COLUMNS)
ALL_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
AGENT_LOOP_NAME = "rlkit_agent"
