"""Task health: does every task of a set grade as it must, before anyone trains on it?

Each task gets its image (built offline if missing), then the reference solution (oracle)
and the do-nothing agent (nop) in real sandboxes, all tasks concurrently. A healthy task
gives the oracle reward 1 and the no-op reward 0, both graded by the task's own tests. A
broken one is named with the first reason found:

* its image is missing or cannot be built offline (e.g. FROM an image no registry here has);
* its verifier fails in setup (no reward file, a timeout, tests that download tools);
* the oracle does not get 1 (a broken solution or tests), or the no-op does not get 0
  (tests that pass on the untouched task teach nothing).

`write_task_ok` records the verdicts in a task index: a `task_ok` column and, in the
footer's key-value metadata (`rlkit.task_check`), the broken tasks and their reasons, which
preflight reads without loading the table.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.rollout.records import Outcome
from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from rlkit.tasks.schema import TASK_CHECK_KEY

_SETUP_FAILURES = {Outcome.NO_REWARD_FILE: "the tests wrote no reward",
                   Outcome.VERIFIER_TIMEOUT: "the tests ran past their timeout",
                   Outcome.VERIFIER_ERROR: "the verifier failed",
                   Outcome.SANDBOX_ERROR: "the sandbox failed",
                   Outcome.ERROR: "the trial failed"}


@dataclass
class TaskHealth:
    task_id: str
    image: str
    problems: list[str] = field(default_factory=list)
    oracle: TrialOutcome | None = None
    nop: TrialOutcome | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _detail(outcome: TrialOutcome) -> str:
    message = (outcome.exception_message or "").strip().splitlines()
    return f": {message[0][:300]}" if message else ""


def judge(health: TaskHealth) -> TaskHealth:
    """The problems an oracle and a no-op outcome show (first the verifier's own failures)."""
    for agent, outcome, expected in (("oracle", health.oracle, 1.0), ("no-op", health.nop, 0.0)):
        if outcome is None:
            continue
        if outcome.reason in _SETUP_FAILURES:
            health.problems.append(f"{agent}: {_SETUP_FAILURES[outcome.reason]} ({outcome.reason}){_detail(outcome)}")
        elif outcome.reason is Outcome.TAMPER_SUSPECT:
            health.problems.append(f"{agent}: flagged tamper_suspect{_detail(outcome)}")
        elif outcome.reward != expected:
            what = "the reference solution does not pass" if agent == "oracle" else "the untouched task passes"
            health.problems.append(f"{agent} got reward {outcome.reward:g}, not {expected:g}: {what} "
                                   f"({outcome.reason})")
    return health


async def check_tasks(specs: Sequence[Any], *, trials_root: Path, max_concurrency: int = 4,
                      environment_kwargs: dict[str, Any] | None = None,
                      progress: Callable[[str, str], None] | None = None) -> list[TaskHealth]:
    """Check `specs` (`rlkit.tasks.images.TaskImageSpec`s): images first, then the oracle and
    no-op trials of every buildable task at once (at most `max_concurrency` sandboxes).
    `progress(task_id, what)` is called after each image and trial."""
    from rlkit.sandbox.images import FAILED, build_task_images
    from rlkit.sandbox.pool import run_blocking

    results = {spec.task_id: TaskHealth(spec.task_id, spec.image) for spec in specs}
    runnable = []
    for spec in specs:
        if spec.task_dir is None:
            results[spec.task_id].problems.append("task_source is not a local task directory")
        else:
            [built] = await run_blocking(build_task_images, [spec], force=True)  # buildable, not just cached
            if built.status in FAILED:
                lines = [line for line in built.detail.splitlines() if line.strip()]
                shown = "\n    ".join([lines[0], *[x.strip() for x in lines[1:] if x.strip().startswith("hint:")]])
                results[spec.task_id].problems.append(f"image {built.image} {built.status}: {shown}")
            elif built.status == "skipped":
                results[spec.task_id].problems.append(f"image: {built.detail}")
            else:
                runnable.append(spec)
        if progress:
            progress(spec.task_id, "image")

    gate = asyncio.Semaphore(max_concurrency)

    async def one(spec: Any, agent: str) -> None:
        async with gate:
            trial = TrialSpec(task_dir=spec.task_dir, agent=agent, trials_dir=trials_root,
                              session=f"{spec.image.split('/')[-1].split(':')[0][:60]}__{agent}",
                              environment_kwargs={"image": spec.image, **(environment_kwargs or {})})
            [outcome] = await run_trials([trial], max_concurrency=1)
        setattr(results[spec.task_id], agent, outcome)
        if progress:
            progress(spec.task_id, agent)

    await asyncio.gather(*(one(spec, agent) for spec in runnable for agent in ("oracle", "nop")))
    return [judge(results[spec.task_id]) for spec in specs]


def write_task_ok(index: Path, healths: Sequence[TaskHealth]) -> int:
    """Add (or replace) the index's `task_ok` column and its footer verdicts; rows of tasks not
    checked keep a null. Answers how many rows were marked not ok."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(index)
    verdicts = {h.task_id: h for h in healths}
    column = pa.array([verdicts[t].ok if t in verdicts else None for t in table.column("task_id").to_pylist()],
                      pa.bool_())
    if "task_ok" in table.column_names:
        table = table.drop_columns(["task_ok"])
    table = table.append_column("task_ok", column)
    broken = {h.task_id: "; ".join(h.problems) for h in healths if not h.ok}
    metadata = dict(table.schema.metadata or {})
    metadata[TASK_CHECK_KEY.encode()] = json.dumps({"checked": len(verdicts), "broken": broken}).encode()
    pq.write_table(table.replace_schema_metadata(metadata), index)
    return len(broken)
