"""A pass over a task index: k attempts per task, resumable, reduced to pass rates.

`rlkit rollout` (difficulty-filtered indexes) and `rlkit eval` (pass@k) are both this:
every row gets `k` trials through the engine; each finished trial is appended to a
results JSONL at once, so an interrupted pass resumes where it stopped (attempts already
in the file are not run again). A trial lost to the infrastructure counts as an attempt
but not in the pass rate, which is the share of graded attempts that fully passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rlkit.errors import UserError
from rlkit.rollout.records import Outcome, TrialRecord
from rlkit.rollout.summary import summarize, write_summary

if TYPE_CHECKING:
    from rlkit.rollout.engine import RolloutEngine
    from rlkit.tasks.index import IndexRow

RESULTS_FILE = "results.jsonl"


class AttemptResult(BaseModel):
    """One line of the results JSONL."""

    model_config = ConfigDict(extra="ignore")

    task_id: str
    session: str
    outcome: Outcome
    reward: float
    attempts: int = 1
    trial_dir: str | None = None
    attempt: int | None = None  # the task's attempt number in the pass (it seeds a seeded pass)

    @property
    def graded(self) -> bool:
        return not self.outcome.masked

    @property
    def passed(self) -> bool:
        return self.graded and self.reward >= 1.0

    @classmethod
    def of(cls, record: TrialRecord, attempt: int | None = None) -> AttemptResult:
        return cls(task_id=record.task_id, session=record.session, outcome=record.outcome, reward=record.reward,
                   attempts=record.attempts, trial_dir=str(record.trial_dir) if record.trial_dir else None,
                   attempt=attempt)


class TaskTally(BaseModel):
    """Attempts of one task so far."""

    task_id: str
    attempts: int = 0
    graded: int = 0
    passed: int = 0

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.graded if self.graded else None

    def add(self, result: AttemptResult) -> None:
        self.attempts += 1
        self.graded += result.graded
        self.passed += result.passed


def read_results(path: Path) -> list[AttemptResult]:
    """The results of earlier runs of this pass (a torn last line, from a kill, is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(AttemptResult.model_validate_json(line))
        except ValueError:
            continue
    return out


def tally(rows: Sequence[IndexRow], results: Sequence[AttemptResult]) -> dict[str, TaskTally]:
    tallies = {row.task_id: TaskTally(task_id=row.task_id) for row in rows}
    for result in results:
        if result.task_id in tallies:
            tallies[result.task_id].add(result)
    return tallies


async def run_pass(engine: RolloutEngine, rows: Sequence[IndexRow], k: int, results_path: Path, *, step: int = 0,
                   on_result: Callable[[AttemptResult, dict[str, TaskTally]], None] | None = None,
                   ) -> dict[str, TaskTally]:
    """Run the attempts still missing for `k` per row; append each to `results_path` as it ends."""
    import asyncio

    if k < 1:
        raise UserError(f"attempts per task must be >= 1, got {k}", key="k", fix="e.g. -k 4")
    tallies = tally(rows, read_results(results_path))
    # (position, row, attempt number): a resumed pass numbers its new attempts after the recorded ones
    todo = [(pos, row, tallies[row.task_id].attempts + i) for pos, row in enumerate(rows)
            for i in range(max(0, k - tallies[row.task_id].attempts))]
    results_path.parent.mkdir(parents=True, exist_ok=True)
    records: list[TrialRecord] = []

    _end_torn_line(results_path)
    with results_path.open("a") as out:
        async def one(pos: int, row: IndexRow, attempt: int) -> None:
            record = await engine.run_trial(row, uid=f"{step}:{pos}:{row.task_id}", step=step, attempt=attempt)
            result = AttemptResult.of(record, attempt)
            out.write(result.model_dump_json() + "\n")
            out.flush()  # each line lands whole: a killed pass resumes from here
            records.append(record)
            tallies[row.task_id].add(result)
            if on_result is not None:
                on_result(result, tallies)

        await asyncio.gather(*(one(pos, row, attempt) for pos, row, attempt in todo))
    if records:
        write_summary(engine.config.step_dir(step), summarize(step, records, wall_s=0.0))
    return tallies


def _end_torn_line(path: Path) -> None:
    """A line torn by a kill ends here, so the next result starts a line of its own."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as raw:
        raw.seek(-1, 2)
        if raw.read(1) != b"\n":
            raw.write(b"\n")


def with_pass_rates(rows: Sequence[IndexRow], tallies: dict[str, TaskTally]) -> list[IndexRow]:
    """The index rows with their measured pass_rate (None where no attempt was graded)."""
    return [row.model_copy(update={"pass_rate": tallies[row.task_id].pass_rate}) for row in rows]


def difficulty_filter(rows: Sequence[IndexRow], low: float = 0.0, high: float = 1.0,
                      inclusive: bool = False) -> list[IndexRow]:
    """Rows whose pass rate lies between low and high (exclusive by default: neither always
    failed nor always passed, the tasks a group-relative advantage learns from)."""
    def keep(p: float | None) -> bool:
        if p is None:
            return False
        return low <= p <= high if inclusive else low < p < high

    return [row for row in rows if keep(row.pass_rate)]


def results_summary(tallies: dict[str, TaskTally]) -> dict[str, Any]:
    """Totals for a pass's closing line."""
    values = list(tallies.values())
    return {"tasks": len(values), "attempts": sum(t.attempts for t in values),
            "graded": sum(t.graded for t in values), "passed": sum(t.passed for t in values),
            "masked": sum(t.attempts - t.graded for t in values)}


def pass_at_k_report(tallies: dict[str, TaskTally], k: int) -> dict[str, Any]:
    """`rlkit eval`'s results (and the trainer's validation): per task n, c, pass@1 and
    pass@k; overall, their means over the tasks; `stderr`, pass@1's standard error over the
    attempts (the tasks held fixed: sqrt(sum of p(1-p)/n over tasks) / tasks)."""
    import math

    from rlkit.rollout.passk import mean_pass_at, task_pass_at

    ks = sorted({1, k})
    per_task = {tid: task_pass_at((t.graded, t.passed), ks) for tid, t in tallies.items()}
    graded = [t for t in tallies.values() if t.graded]
    spread = sum((t.passed / t.graded) * (1 - t.passed / t.graded) / t.graded for t in graded)
    return {
        "k": k,
        "stderr": {"pass@1": math.sqrt(spread) / len(graded) if graded else None},
        "overall": {f"pass@{n}": mean_pass_at(per_task, n) for n in ks},
        "tasks": {tid: {"n": t.graded, "c": t.passed, "attempts": t.attempts,
                        **{f"pass@{n}": per_task[tid][n] for n in ks}} for tid, t in tallies.items()},
    }


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
    return path


@dataclass
class RolloutResult:
    """What `rlkit rollout` / `rlkit.rollout` produced: pass rates per task, where the indexes went."""

    index: Path
    out: Path
    results: Path  # results.jsonl: one line per finished trial (a rerun resumes from it)
    pass_rates: Path  # the index with pass_rate filled in
    filtered: Path | None  # the rows inside the window; None when no task is inside it (nothing written)
    window: tuple[float, float, bool]  # (low, high, inclusive)
    totals: dict[str, int]
    tasks: dict[str, float | None]  # task_id -> pass rate (None: no graded attempt)
    kept: list[str] = field(default_factory=list)  # task ids in the filtered index

    def window_text(self) -> str:
        low, high, inclusive = self.window
        bounds = "[]" if inclusive else "()"
        return f"{bounds[0]}{low:g}, {high:g}{bounds[1]}"

    def as_dict(self) -> dict[str, Any]:
        low, high, inclusive = self.window
        return {"index": str(self.index), "out": str(self.out), "results": str(self.results),
                "pass_rates": str(self.pass_rates), "filtered": str(self.filtered) if self.filtered else None,
                "window": {"min": low, "max": high, "inclusive": inclusive}, "totals": self.totals,
                "tasks": self.tasks, "kept": self.kept}


def rollout_result(index: Path, out: Path, rows: Sequence[IndexRow], tallies: dict[str, TaskTally], *,
                   low: float = 0.0, high: float = 1.0, inclusive: bool = False) -> RolloutResult:
    """Write `<index>.pass_rates.parquet` and (when a task lies in the window) `<index>.filtered.parquet`."""
    from rlkit.tasks.index import write_index

    rated = with_pass_rates(rows, tallies)
    rated_path = write_index(rated, out / f"{index.stem}.pass_rates.parquet")
    kept = difficulty_filter(rated, low, high, inclusive=inclusive)
    filtered = write_index(kept, out / f"{index.stem}.filtered.parquet") if kept else None
    return RolloutResult(index=index, out=out, results=out / RESULTS_FILE, pass_rates=rated_path, filtered=filtered,
                         window=(low, high, inclusive), totals=results_summary(tallies),
                         tasks={row.task_id: row.pass_rate for row in rated}, kept=[row.task_id for row in kept])


@dataclass
class EvalResult:
    """What `rlkit eval` / `rlkit.eval` measured: pass@1 and pass@k per task and overall."""

    model: str
    index: Path
    agent: str
    k: int
    overall: dict[str, float | None]
    tasks: dict[str, dict[str, Any]]
    path: Path  # eval_results.json (as_dict without "path")

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "index": str(self.index), "agent": self.agent, "k": self.k,
                "overall": self.overall, "tasks": self.tasks, "path": str(self.path)}


def eval_result(model: str, index: Path, agent: str, k: int, tallies: dict[str, TaskTally], path: Path) -> EvalResult:
    """pass@k of the tallies, written to `path` (eval_results.json)."""
    report = pass_at_k_report(tallies, k)
    result = EvalResult(model=model, index=index, agent=agent, k=k, overall=report["overall"], tasks=report["tasks"],
                        path=path)
    data = result.as_dict()
    data.pop("path")
    write_json(path, data)
    return result
