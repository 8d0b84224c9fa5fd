"""Steps and trials under harbor_trials/<project>/<exp>/: step_<N>/summary.json and harbor's trial folders.

    step_<N>/summary.json                 the step's counts (rlkit.rollout.records.StepSummary, read as JSON)
    step_<N>/<session>/agent/trajectory.json   ATIF: steps with messages, tool calls, observations
    step_<N>/<session>/verifier/test-stdout.txt, reward.txt
    step_<N>/<session>/exception.txt      harbor's traceback when the trial raised

Per-trial outcome and reward come from the summary's `sessions`; a summary without them (an
older run) falls back to reward.txt. Every path a request names goes through `safe_child`:
one plain name per level, resolved inside the run's folder. Every file is read with the trials folder
as its root (rlkit.config.files): a link that leaves it (to /etc/shadow, /proc/self/environ) is not
read, and step or trial folders that are links are not listed. summary.json is checked as data
(rlkit.monitor.values.summary).

One rule counts a trial as passed in every table: graded (not masked) and reward >= 1, the rule
of the summary's pass_rate. The outcome says why a trial ended: a trial that ran out of response
tokens (`response_budget`) after fixing the code has that outcome and counts as passed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rlkit.config import files
from rlkit.monitor import values
from rlkit.monitor.run_files import NAME_RE, PathRefused, read_json, read_text, safe_child
from rlkit.monitor.trajectory import turns

STEP_RE = re.compile(r"^step_(\d+)$")
BULKY_METRICS = ("prompt_token_ids", "completion_token_ids", "logprobs", "response_ids", "response_logprobs")


def _folders(parent: Path) -> list[Path]:
    """The sub-folders of `parent` that are folders, not links to one (a link to /etc lists nothing)."""
    try:
        with os.scandir(parent) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except (OSError, ValueError):
        return []


def step_numbers(trials_root: Path) -> list[int]:
    names = [p.name for p in _folders(trials_root)]
    return sorted(int(m.group(1)) for m in map(STEP_RE.match, names) if m and len(m.group(1)) <= 9)


def read_summary(trials_root: Path, step: int) -> dict[str, Any] | None:
    """step_<N>/summary.json as data (values.summary: every field of its type and bounds), None when unreadable."""
    return values.summary(read_json(trials_root / f"step_{step}" / "summary.json", trials_root))


def passed(masked: Any, reward: Any) -> bool:
    """The one rule (rlkit.rollout.summary's pass_rate): graded and reward >= 1."""
    return not masked and isinstance(reward, int | float) and reward >= 1.0


def step_counts(summary: dict[str, Any]) -> dict[str, Any]:
    """passed / graded of a step by that rule: from its sessions, else from pass_rate (older summaries)."""
    sessions = [s for s in summary.get("sessions") or [] if isinstance(s, dict)]
    if sessions:
        graded = [s for s in sessions if not s.get("masked")]
        return {"passed": sum(passed(s.get("masked"), s.get("reward")) for s in graded), "graded": len(graded)}
    trials, masked, rate = summary.get("trials"), summary.get("masked") or 0, summary.get("pass_rate")
    if not isinstance(trials, int) or not isinstance(rate, int | float) or not isinstance(masked, int):
        return {}
    graded = max(trials - masked, 0)
    return {"passed": round(rate * graded), "graded": graded}


def _reward_file(trial_dir: Path, root: Path) -> float | None:
    text = read_text(trial_dir / "verifier" / "reward.txt", root, 100)
    try:
        return values.number(float(text.strip())) if text else None
    except ValueError:
        return None


def list_trials(trials_root: Path, step: int, summary: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per trial folder of a step: session, task, outcome, reward, masked, turns."""
    step_dir = trials_root / f"step_{step}"
    summary = summary if summary is not None else read_summary(trials_root, step)
    known = {s["session"]: s for s in (summary or {}).get("sessions") or []}
    rows = []
    folders = sorted(p for p in _folders(step_dir) if NAME_RE.match(p.name)) if files.inside(step_dir, trials_root) \
        else []
    for folder in folders:
        row = known.get(folder.name)
        if row is None:
            reward = _reward_file(folder, trials_root)
            outcome = "unknown" if reward is None else ("passed" if reward > 0 else "failed_tests")
            row = {"session": folder.name, "task_id": folder.name.rsplit("__", 1)[0], "outcome": outcome,
                   "reward": reward, "masked": None, "num_turns": None, "parse_failures": None}
        rows.append({**row, "passed": passed(row.get("masked"), row.get("reward"))})
    return rows


def _slim_step(step: dict[str, Any]) -> dict[str, Any]:
    out = dict(step)
    metrics = out.get("metrics")
    if isinstance(metrics, dict):
        out["metrics"] = {k: v for k, v in metrics.items() if k not in BULKY_METRICS}
    return out


def trial_detail(trials_root: Path, step: int, session: str) -> dict[str, Any]:
    """What the browser shows of one trial: the instruction and the turns (rlkit.monitor.trajectory), ATIF
    steps (token ids left out), test output, reward, exception."""
    folder = safe_child(trials_root, f"step_{step}", session)
    if not files.is_dir(folder):
        raise PathRefused(f"no trial {session!r} in step {step}", fix="pick a trial from the step's list")
    trajectory = read_json(folder / "agent" / "trajectory.json", trials_root)
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    return {
        "step": step, "session": session,
        "row": next((r for r in list_trials(trials_root, step) if r["session"] == session), None),
        **turns(folder / "agent", trajectory if isinstance(trajectory, dict) else None, trials_root),
        "atif": {k: v for k, v in (trajectory or {}).items() if k != "steps"} if isinstance(trajectory, dict) else None,
        "steps": [_slim_step(s) for s in steps if isinstance(s, dict)] if isinstance(steps, list) else [],
        "test_stdout": read_text(folder / "verifier" / "test-stdout.txt", trials_root),
        "reward": _reward_file(folder, trials_root),
        "exception": read_text(folder / "exception.txt", trials_root, 20_000),
        "files": _file_names(folder),
    }


def _file_names(folder: Path, limit: int = 200) -> list[str]:
    """The trial's regular files (links not followed, not listed), at most `limit`, by relative path."""
    found: list[str] = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, folder))
            if len(found) >= 10 * limit:
                return sorted(found)[:limit]
    return sorted(found)[:limit]


def trajectory_file(trials_root: Path, step: int, session: str) -> Path:
    path = safe_child(trials_root, f"step_{step}", session, "agent", "trajectory.json")
    if not files.is_file(path):
        raise PathRefused(f"trial {session!r} of step {step} has no agent/trajectory.json", fix="pick another trial")
    return path
