"""A step's `summary.json` built one trial at a time (TRAINER=verl), for status and the dashboard.

The local trainer's engine runs a step whole (`RolloutEngine.run_step`) and writes its summary once.
Under verl each trial is one sample of an agent-loop worker, and a cluster has several workers (one
process each, on several nodes) filing trials of one step. Each finished trial is appended to
`step_<N>/.trials.jsonl` (its record less the tokens, whether it had tokens to train on, when it ran)
and the summary is rebuilt from every line, under an exclusive lock on `step_<N>/.summary.lock`, so
writers on any node (a shared filesystem) never lose each other's trials.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from rlkit.rollout.records import StepSummary, TrialRecord
from rlkit.rollout.summary import summarize, write_summary

TRIALS_FILE = ".trials.jsonl"
LOCK_FILE = ".summary.lock"
SKIPPED_FILE = ".update_skipped"


def add_trial(step_dir: Path, step: int, record: TrialRecord, started: float, ended: float) -> StepSummary:
    """Append one finished trial (`started`/`ended`: epoch seconds) and rewrite the step's summary.json."""
    step_dir.mkdir(parents=True, exist_ok=True)
    entry = {"record": record.model_dump(mode="json", exclude={"segments"}), "trainable": record.trainable,
             "started": started, "ended": ended}
    with (step_dir / LOCK_FILE).open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # released when the file closes
        with (step_dir / TRIALS_FILE).open("a") as out:
            out.write(json.dumps(entry) + "\n")
        entries = [json.loads(line) for line in (step_dir / TRIALS_FILE).read_text().splitlines() if line.strip()]
        summary = summarize(step, [TrialRecord.model_validate(e["record"]) for e in entries],
                            max(e["ended"] for e in entries) - min(e["started"] for e in entries))
        groups: dict[str, bool] = {}  # the records carry no tokens here: trainability is the line's
        for e in entries:
            uid = e["record"]["uid"]
            groups[uid] = groups.get(uid, False) or bool(e["trainable"])
        summary.dropped_groups = sum(not trainable for trainable in groups.values())
        summary.update_skipped = (step_dir / SKIPPED_FILE).exists()
        write_summary(step_dir, summary)
    return summary


def mark_update_skipped(step_dir: Path, summary: StepSummary) -> StepSummary:
    """The trainer skipped this step's update (no trainable trial): say so in its summary.json, and keep
    saying it if a late trial rewrites the summary (`add_trial` reads the marker file)."""
    step_dir.mkdir(parents=True, exist_ok=True)
    with (step_dir / LOCK_FILE).open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        (step_dir / SKIPPED_FILE).touch()
        summary = summary.model_copy(update={"update_skipped": True})
        write_summary(step_dir, summary)
    return summary
