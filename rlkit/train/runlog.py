"""A run's step metrics, written where and how verl writes them (LOGGER means the same everywhere).

  console      `step:N - key:value - ...` (verl's `concat_dict_to_str`) appended to logs/<exp>.log,
               and echoed to the terminal
  file         `{"step": N, "data": {...}}` per line appended to logs/<exp>.jsonl (verl's FileLogger
               shape; appended, not truncated, so a resumed run keeps its history)
  tensorboard, wandb, mlflow, ...
               verl's own `Tracking` backends; event files under logs/tensorboard/<project>/<exp>/,
               wandb offline under logs/wandb/ when there is no WANDB_API_KEY

Every attempt of a run (the first start and each restart) writes one marker line to both
files before its steps: `{"event": "attempt", "attempt": N, "from_step": S, "total_steps": T,
"pid": P, "time": ISO, "config": PATH}` in the JSONL and `[rlkit] attempt {...same JSON...}` in
the console log, and in logs/<exp>_attempts.jsonl (where readers find the latest one without
reading the whole log). A restart from step S redoes the steps after S: readers keep, for each
step, the latest attempt's line (`read_jsonl` here, rlkit.monitor.metrics for status and the
dashboard).

Status and the dashboard read the two files; they never ask which trainer wrote them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import numbers
import os
import pprint
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlkit.config.paths import RunPaths

OWN_BACKENDS = ("console", "file")
ATTEMPT_EVENT = "attempt"
CONSOLE_ATTEMPT_PREFIX = "[rlkit] attempt "
NOTE_PREFIX = "[rlkit] "


def console_line(step: int, data: Mapping[str, Any]) -> str:
    """verl's console format (verl.utils.logger.aggregate_logger.concat_dict_to_str)."""
    parts = [f"step:{step}"]
    parts += [f"{k}:{pprint.pformat(v)}" for k, v in data.items() if isinstance(v, numbers.Number)]
    return " - ".join(parts)


def _plain(value: Any) -> Any:
    """JSON-safe scalars (numpy and torch scalars to Python; NaN stays a float, as orjson would write null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """One run's metric sinks. `log(step, data)` writes a step to all of them."""

    def __init__(self, paths: RunPaths, loggers: str, *, config: Mapping[str, Any] | None = None,
                 echo: Callable[[str], None] | None = print, wandb_key: str = "") -> None:
        self.paths = paths
        self.backends = [x.strip() for x in loggers.split(",") if x.strip()]
        self.echo = echo
        paths.logs.mkdir(parents=True, exist_ok=True)
        self._console = paths.console_log.open("a") if "console" in self.backends else None
        self._file = paths.jsonl.open("a") if "file" in self.backends else None
        self._tracking: Any = None
        others = [b for b in self.backends if b not in OWN_BACKENDS]
        if others:
            self._tracking = self._open_tracking(others, config or {}, wandb_key)

    def _open_tracking(self, backends: list[str], config: Mapping[str, Any], wandb_key: str) -> Any:
        os.environ.setdefault("TENSORBOARD_DIR", str(self.paths.tensorboard))
        if "wandb" in backends:
            self.paths.wandb.mkdir(parents=True, exist_ok=True)
            os.environ.setdefault("WANDB_DIR", str(self.paths.wandb))
            if not (wandb_key or os.environ.get("WANDB_API_KEY")):
                os.environ.setdefault("WANDB_MODE", "offline")  # no key: log locally, `wandb sync` later
        from verl.utils.tracking import Tracking

        return Tracking(self.paths.project, self.paths.exp, default_backend=backends,
                        config={"trainer": {}, **dict(config)})

    def log(self, step: int, data: Mapping[str, Any]) -> None:
        clean = {k: _plain(v) for k, v in data.items()}
        if self._console is not None:
            line = console_line(step, {k: v for k, v in clean.items() if v is not None})
            self._console.write(line + "\n")
            self._console.flush()
            if self.echo is not None:
                self.echo(line)
        if self._file is not None:
            self._file.write(json.dumps({"step": step, "data": clean}) + "\n")
            self._file.flush()
        if self._tracking is not None:
            self._tracking.log({k: v for k, v in clean.items() if isinstance(v, int | float)}, step=step)

    def mark_attempt(self, from_step: int, total_steps: int, config: str = "") -> int:
        """Write this attempt's marker to the console and file logs; its number (1 on a fresh run)."""
        attempt, line = attempt_marker(self.paths, from_step, total_steps, config)
        if self._console is not None:
            self._console.write(CONSOLE_ATTEMPT_PREFIX + line + "\n")
            self._console.flush()
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
        with self.paths.attempts.open("a") as attempts:
            attempts.write(line + "\n")
        if attempt > 1 and self.echo is not None:
            self.echo(f"attempt {attempt} of {self.paths.exp}: steps after {from_step} are redone")
        return attempt

    def close(self) -> None:
        for f in (self._console, self._file):
            if f is not None:
                f.close()
        self._console = self._file = None
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None


def attempt_marker(paths: RunPaths, from_step: int, total_steps: int | None, config: str = "") -> tuple[int, str]:
    """This attempt's number (1 on a fresh run) and its marker line (JSON)."""
    attempt = 1 + sum(1 for r in _jsonl_lines(paths.attempts) if r.get("event") == ATTEMPT_EVENT)
    logged = any(p.is_file() and p.stat().st_size for p in (paths.jsonl, paths.console_log))
    if attempt == 1 and logged:
        attempt = 2  # a log written before attempt markers: this is a restart
    marker = {"event": ATTEMPT_EVENT, "attempt": attempt, "from_step": from_step, "total_steps": total_steps,
              "pid": os.getpid(), "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "config": config}
    return attempt, json.dumps(marker)


def mark_attempt_files(paths: RunPaths, from_step: int, total_steps: int | None, config: str = "",
                       *, jsonl: bool = True) -> int:
    """TRAINER=verl: the attempt's marker appended to logs/<exp>.log, logs/<exp>.jsonl (with verl's file
    logger on) and the attempts file before verl's trainer starts (its step lines follow), as the local
    trainer writes it."""
    attempt, line = attempt_marker(paths, from_step, total_steps, config)
    paths.logs.mkdir(parents=True, exist_ok=True)
    targets = [(paths.console_log, CONSOLE_ATTEMPT_PREFIX + line), (paths.attempts, line)]
    for path, text in targets + ([(paths.jsonl, line)] if jsonl else []):
        with path.open("a") as out:
            out.write(text + "\n")
    return attempt


def note_lines(paths: RunPaths, lines: list[str]) -> None:
    """Lines of rlkit's own (a collapse named while it happens) appended to logs/<exp>.log as `[rlkit] ...`,
    in one write, beside the trainer's step lines; readers of step lines pass them by."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    with paths.console_log.open("a") as out:
        out.write("".join(f"{NOTE_PREFIX}{line}\n" for line in lines))


def _jsonl_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line from a kill
            if isinstance(record, dict):
                out.append(record)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The file logger's step records in step order, each step's from its latest attempt: a restart
    marker from step S drops the earlier attempts' records of the steps after S."""
    steps: dict[int, dict[str, Any]] = {}
    for record in _jsonl_lines(path):
        if record.get("event") == ATTEMPT_EVENT and isinstance(record.get("from_step"), int):
            steps = {k: v for k, v in steps.items() if k <= record["from_step"]}
        elif isinstance(record.get("step"), int):
            steps[record["step"]] = record
    return [steps[k] for k in sorted(steps)]
