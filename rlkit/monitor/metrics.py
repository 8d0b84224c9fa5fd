"""A run's step metrics from the files a trainer writes, whichever trainer wrote them.

Two sources, one shape (`StepMetrics`: step -> {metric: float}):
  logs/<exp>.jsonl   verl's file logger: `{"step": N, "data": {...}}` per line
  logs/<exp>.log     verl's console lines: `step:N - key:value - ...`; values as Python
                     prints them (`0.12`, `np.float64(0.12)`, `np.int64(3)`, `tensor(0.5)`,
                     `nan`); lines may carry a prefix (Ray's `(TaskRunner pid=..)`) and the
                     file holds everything else the trainer printed
The JSONL file wins when it has records; the console log is the fallback (a verl run whose
stdout was redirected). Reads are incremental (`MetricsReader.poll`).

Attempts: each start of a run writes a marker line (rlkit.train.runlog: `{"event": "attempt",
"attempt": N, "from_step": S, "total_steps": T, "pid": P, ...}`, in the console log after
`[rlkit] attempt `). A restart from step S redoes the steps after S, so every reader here keeps,
for each step, the line of the latest attempt that logged it: a marker drops the steps after its
`from_step` that earlier attempts logged. A log without markers is one attempt.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.files import FileReadError, open_regular
from rlkit.config.paths import RunPaths
from rlkit.monitor.tail import LineTail, lines_from_end, lines_from_start

STEP_RE = re.compile(r"(?:^|[\s)\]])step:(\d+) - ")
# np.float64(0.1), np.int64(3), numpy.float32(1.0), tensor(0.5), tensor(0.5, device='cuda:0')
WRAPPED_RE = re.compile(r"^[A-Za-z_][\w.]*\(\s*([^,()]+?)\s*(?:,.*)?\)$")
STEP_BYTES_RE = re.compile(rb"step:\d+ - ")
ELAPSED_KEYS = ("timing_s/step", "perf/time_per_step")
ATTEMPT_EVENT = "attempt"
CONSOLE_ATTEMPT_PREFIX = "[rlkit] attempt "


@dataclass(frozen=True)
class Attempt:
    """One start of a run (its marker line)."""

    attempt: int
    from_step: int
    total_steps: int | None = None
    pid: int | None = None
    time: str | None = None
    config: str | None = None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def parse_attempt(line: str) -> Attempt | None:
    """An attempt marker of either file; None for any other line."""
    text = line.removeprefix(CONSOLE_ATTEMPT_PREFIX)
    if not text.startswith("{") or ATTEMPT_EVENT not in text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") != ATTEMPT_EVENT:
        return None

    def number(key: str) -> int | None:
        value = record.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    from_step = number("from_step")
    if from_step is None:
        return None
    text_of = {k: record[k] for k in ("time", "config") if isinstance(record.get(k), str)}
    return Attempt(number("attempt") or 1, from_step, number("total_steps"), number("pid"), **text_of)


def parse_value(text: str) -> float | None:
    text = text.strip()
    m = WRAPPED_RE.match(text)
    if m:
        text = m.group(1)
    if text in {"True", "np.True_"}:
        return 1.0
    if text in {"False", "np.False_"}:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_console_line(line: str) -> tuple[int, dict[str, float]] | None:
    """One verl console line (`concat_dict_to_str`) → (step, metrics); None for any other line."""
    m = STEP_RE.search(line)
    if m is None:
        return None
    data: dict[str, float] = {}
    for part in line[m.end():].split(" - "):
        key, sep, raw = part.partition(":")
        if not sep:
            continue
        value = parse_value(raw)
        if value is not None:
            data[key.strip()] = value
    return int(m.group(1)), data


def parse_jsonl_line(line: str) -> tuple[int, dict[str, float]] | None:
    try:
        record = json.loads(line)
        step = int(record["step"])
        raw = record.get("data") or {}
        if not isinstance(raw, dict):
            return None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # a torn line of a killed run, or not a record
    data = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            data[key] = float(value)
    return step, data


@dataclass
class StepMetrics:
    """Metrics per step, each from the latest attempt that logged it; the attempts seen."""

    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)

    def add(self, step: int, data: dict[str, float]) -> None:
        self.steps.pop(step, None)  # a step logged again goes to the end, in logging order
        self.steps[step] = data

    def restart(self, attempt: Attempt) -> None:
        """A new attempt: the steps after its from_step are redone."""
        self.attempts.append(attempt)
        self.steps = {k: v for k, v in self.steps.items() if k <= attempt.from_step}

    @property
    def last(self) -> tuple[int, dict[str, float]] | None:
        if not self.steps:
            return None
        step = max(self.steps)
        return step, self.steps[step]

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for data in self.steps.values():
            seen.update(dict.fromkeys(data))
        return sorted(seen)


def elapsed(data: dict[str, float]) -> float | None:
    for key in ELAPSED_KEYS:
        if key in data:
            return data[key]
    return None


class MetricsReader:
    """Incremental reader of one run's metrics. `poll()` reads what was appended since the last call."""

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        self.metrics = StepMetrics()
        self.source: Path | None = None
        self._tail: LineTail | None = None
        self._parse = parse_jsonl_line

    def _pick(self) -> None:
        if self._tail is not None:
            return
        for path, parse in ((self.paths.jsonl, parse_jsonl_line), (self.paths.console_log, parse_console_line)):
            if path.is_file() and path.stat().st_size > 0:
                self.source, self._parse, self._tail = path, parse, LineTail(path)
                return

    def poll(self) -> list[tuple[int, dict[str, float]]]:
        self._pick()
        if self._tail is None:
            return []
        new = []
        for line in self._tail.poll():
            attempt = parse_attempt(line)
            if attempt is not None:
                self.metrics.restart(attempt)
                continue
            record = self._parse(line)
            if record is not None:
                self.metrics.add(*record)
                new.append(record)
        return new

    @property
    def offset(self) -> int:
        return self._tail.offset if self._tail else 0


def _records(lines: Iterable[str]) -> Iterable[tuple[int, dict[str, float]]]:
    for line in lines:
        record = parse_jsonl_line(line) if line.startswith("{") else parse_console_line(line)
        if record is not None:
            yield record


def metrics_file(paths: RunPaths) -> Path | None:
    for path in (paths.jsonl, paths.console_log):
        if path.is_file() and path.stat().st_size > 0:
            return path
    return None


@dataclass
class Tail:
    """The end of a run's metrics as the latest attempt leaves them."""

    records: list[tuple[int, dict[str, float]]]  # the last step records in effect, oldest first
    attempt: Attempt | None = None  # the latest attempt's marker (None: one attempt, or before markers)
    latest: int = 0  # how many of `records` (the last ones) the latest attempt logged

    @property
    def latest_records(self) -> list[tuple[int, dict[str, float]]]:
        return self.records[len(self.records) - self.latest:] if self.latest else []


def _tail_lines(path: Path, max_bytes: int) -> Iterable[str]:
    """Step lines and attempt markers, last first."""
    if path.suffix == ".jsonl":
        return lines_from_end(path)
    return step_lines_from_end(path, max_bytes, marker=True)


def latest_attempt(paths: RunPaths) -> Attempt | None:
    """The last line of logs/<exp>_attempts.jsonl (None for a run from before attempt markers)."""
    return next((a for a in map(parse_attempt, lines_from_end(paths.attempts)) if a is not None), None)


def tail(paths: RunPaths, n: int = 5, max_bytes: int = 256 << 20, max_lines: int = 10_000) -> Tail:
    """The last `n` step records in effect, read from the end of the file in blocks (a 1 GB log costs its last
    blocks only; at most `max_bytes` / `max_lines` are looked through), and the latest attempt. Records read
    before reaching any marker are the latest attempt's."""
    path = metrics_file(paths)
    out = Tail([], latest_attempt(paths))
    if path is None:
        return out
    parse = parse_jsonl_line if path.suffix == ".jsonl" else parse_console_line
    ceiling: int | None = None  # an attempt seen (reading backwards) voids earlier lines of steps above its from_step
    seen: set[int] = set()
    found: list[tuple[int, dict[str, float]]] = []
    for line in _bounded(_tail_lines(path, max_bytes), max_lines):
        attempt = parse_attempt(line)
        if attempt is not None:
            if ceiling is None:  # the first marker from the end is the latest attempt's
                out.attempt, out.latest = attempt, len(found)
            ceiling = attempt.from_step if ceiling is None else min(ceiling, attempt.from_step)
            continue
        record = parse(line)
        if record is None or record[0] in seen or (ceiling is not None and record[0] > ceiling):
            continue
        seen.add(record[0])
        found.append(record)
        if len(found) >= n:
            break
    if ceiling is None:  # no marker in reach: every record read is the latest attempt's
        out.latest = len(found)
    out.records = found[::-1]
    return out


def last_records(paths: RunPaths, n: int = 5, max_bytes: int = 256 << 20) -> list[tuple[int, dict[str, float]]]:
    """The last `n` step records in effect (see `tail`)."""
    return tail(paths, n, max_bytes).records


MARK_BYTES_RE = re.compile(rb"step:\d+ - |\[rlkit\] attempt \{")


def _step_lines(block: bytes, marker: bool = False) -> list[str]:
    """Whole lines of `block` holding a step record (or an attempt marker), last first (a literal search, then
    the line around it)."""
    out, last_start = [], -1
    for m in (MARK_BYTES_RE if marker else STEP_BYTES_RE).finditer(block):
        start = block.rfind(b"\n", 0, m.start()) + 1
        if start == last_start:
            continue
        end = block.find(b"\n", m.end())
        out.append(block[start:end if end >= 0 else len(block)].decode("utf-8", "replace"))
        last_start = start
    return out[::-1]


def step_lines_from_end(path: Path, max_bytes: int, chunk: int = 1 << 20, marker: bool = False) -> Iterable[str]:
    """Lines holding `step:N - ` (and with `marker`, attempt markers), last first: blocks are searched as bytes,
    so noise lines cost no decoding."""
    try:
        f = open_regular(path)  # closed in finally; a FIFO or a device never blocks a reader
    except FileReadError:
        return
    try:
        pos = f.seek(0, 2)
        rest = b""
        read = 0
        while pos > 0 and read < max_bytes:
            size = min(chunk, pos)
            pos -= size
            read += size
            f.seek(pos)
            block = f.read(size) + rest
            if pos > 0:  # the block's first line may start in the part not read yet: keep it for the next round
                cut = block.find(b"\n")
                if cut < 0:
                    rest = block
                    continue
                rest, block = block[:cut], block[cut + 1:]
            yield from _step_lines(block, marker)
    finally:
        f.close()


def is_training_record(data: dict[str, float]) -> bool:
    """A step that trained, not verl's validation-only line (val_before_train logs `step:0 - val-core/...`)."""
    return any(not key.startswith(("val", "timing_s/testing")) for key in data)


def first_record(paths: RunPaths, latest: Attempt | None = None) -> tuple[int, dict[str, float]] | None:
    """The first training step's record near the start of the file (bounded: a run's first step is logged early).
    When the latest attempt restarted before that step (`latest.from_step` below it), the step was redone: its
    record is the latest attempt's, read from after that attempt's marker."""
    path = metrics_file(paths)
    if path is None:
        return None
    first = next((r for r in _records(lines_from_start(path)) if is_training_record(r[1])), None)
    if first is None or latest is None or latest.from_step >= first[0]:
        return first
    after, found = False, None
    for line in lines_from_start(path, max_bytes=256 << 20):
        attempt = parse_attempt(line)
        if attempt is not None:
            after = attempt == latest
            continue
        record = next(iter(_records([line])), None) if after else None
        if record is not None and is_training_record(record[1]):
            found = record
            break
    return found


def _bounded(lines: Iterable[str], limit: int) -> Iterable[str]:
    for i, line in enumerate(lines):
        if i >= limit:
            return
        yield line


def read_all(paths: RunPaths) -> StepMetrics:
    reader = MetricsReader(paths)
    reader.poll()
    return reader.metrics


