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
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.rollout.interrupt import signals_interrupt
from rlkit.rollout.records import Outcome
from rlkit.rollout.trial import TrialOutcome, TrialSpec, run_trials
from rlkit.tasks.schema import TASK_CHECK_KEY
from rlkit.tasks.task import folder_problem

log = logging.getLogger(__name__)

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
        elif outcome.reason in (Outcome.TAMPER_SUSPECT, Outcome.TESTS_MISSING):
            health.problems.append(f"{agent}: flagged {outcome.reason.value}{_detail(outcome)}")
        elif outcome.reward != expected:
            what = "the reference solution does not pass" if agent == "oracle" else "the untouched task passes"
            health.problems.append(f"{agent} got reward {outcome.reward:g}, not {expected:g}: {what} "
                                   f"({outcome.reason})")
    return health


async def check_tasks(specs: Sequence[Any], *, trials_root: Path, max_concurrency: int = 4,
                      environment_kwargs: dict[str, Any] | None = None,
                      progress: Callable[[str, str], None] | None = None,
                      experiment: str = "tasks-check") -> list[TaskHealth]:
    """Check `specs` (`rlkit.tasks.images.TaskImageSpec`s): images first, then the oracle and
    no-op trials of every buildable task at once (at most `max_concurrency` sandboxes).
    `progress(task_id, what)` is called after each image and trial."""
    from rlkit.sandbox.images import FAILED, build_task_images
    from rlkit.sandbox.pool import run_blocking

    results = {spec.task_id: TaskHealth(spec.task_id, spec.image) for spec in specs}
    runnable = []
    for spec in specs:
        problem = folder_problem(spec.task_dir) if spec.task_dir is not None else None
        if spec.task_dir is None:
            results[spec.task_id].problems.append("task_source is not a local task directory")
        elif problem is not None:  # a FIFO, a link out, a huge file: never sent to the daemon or a sandbox
            results[spec.task_id].problems.append(f"task folder: {problem}")
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
            trial = TrialSpec(task_dir=spec.task_dir, agent=agent, trials_dir=trials_root, experiment=experiment,
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


@dataclass
class TaskCheckResult:
    """What `rlkit tasks check` / `rlkit.tasks_check` found: one verdict per task."""

    source: Path
    tasks: list[TaskHealth]
    wrote_index: bool = False

    @property
    def broken(self) -> list[TaskHealth]:
        return [h for h in self.tasks if not h.ok]

    @property
    def ok(self) -> bool:
        return not self.broken

    def as_dict(self) -> dict[str, Any]:
        def reward(outcome: TrialOutcome | None) -> float | None:
            return None if outcome is None else outcome.reward

        return {"source": str(self.source), "ok": self.ok, "healthy": len(self.tasks) - len(self.broken),
                "broken": len(self.broken), "wrote_index": self.wrote_index,
                "tasks": [{"task_id": h.task_id, "image": h.image, "ok": h.ok, "problems": h.problems,
                           "oracle_reward": reward(h.oracle), "nop_reward": reward(h.nop)} for h in self.tasks]}


def _remove_sandboxes(experiment: str) -> None:
    from rlkit.sandbox import labels
    from rlkit.sandbox.docker_api import remove_labelled

    try:
        remove_labelled({labels.MANAGED: "1", labels.EXPERIMENT: labels.label_value(experiment)})
    except Exception as exc:  # noqa: BLE001 -- the daemon went away: `rlkit cleanup` finds what is left
        log.warning("could not remove the sandboxes of %s: %s (rlkit cleanup removes them)", experiment, exc)


def run_task_check(source: Path, *, concurrency: int = 4, write_index: bool = False, trials_dir: Path | None = None,
                   registry: str | None = None, network: str | None = None,
                   progress: Callable[[int, int, str, str], None] | None = None,
                   log: Callable[[str], None] | None = None) -> TaskCheckResult:
    """Check every task of `source` (a task dir, a dir of task dirs, or a task index): base image,
    task images, then the oracle and the no-op agent in real sandboxes. With `write_index` (an index
    only) the verdicts go into its task_ok column. `progress(done, total, task_id, what)` follows
    each image and trial; `log` gets the base image build's lines."""
    import tempfile

    from rlkit.errors import UserError
    from rlkit.sandbox.base_image import ensure_base_image
    from rlkit.tasks.images import discover_tasks

    source = Path(source)
    is_index = source.is_file() and source.suffix == ".parquet"
    if write_index and not is_index:
        raise UserError(f"--write-index needs a task index, not {source}", key="--write-index",
                        fix="build one with `rlkit index build TASKS_DIR -o FILE.parquet` and check that")
    if concurrency < 1:
        raise UserError("--concurrency must be >= 1", key="--concurrency", fix="e.g. --concurrency 4")
    specs = discover_tasks(source, registry=registry)
    if any(spec.dockerfile and not spec.prebuilt for spec in specs):
        ensure_base_image(log=log or (lambda _msg: None))
    env = {"network": network} if network else {}
    total, done = 3 * len(specs), 0

    def step(task_id: str, what: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, task_id, what)

    experiment = f"tasks-check-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # this check's sandboxes, and no others
    with tempfile.TemporaryDirectory(prefix="rlkit-tasks-check-") as tmp, signals_interrupt():
        try:
            healths = asyncio.run(check_tasks(specs, trials_root=Path(trials_dir) if trials_dir else Path(tmp),
                                              max_concurrency=concurrency, environment_kwargs=env, progress=step,
                                              experiment=experiment))
        finally:  # stopped (Ctrl-C, SIGTERM, SIGHUP) or not: no sandbox of this check stays behind
            _remove_sandboxes(experiment)
    if write_index:
        write_task_ok(source, healths)
    return TaskCheckResult(source, healths, wrote_index=write_index)
