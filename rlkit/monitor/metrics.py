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
A validation-only line (`val-*`, `val/*`: verl validates at the step it resumes from, and logs that
on a line of its own) adds to its step's record instead of replacing the training metrics there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.files import MAX_DEPTH, FileReadError, json_value, open_regular
from rlkit.config.paths import RunPaths
from rlkit.monitor.tail import MAX_LINE, LineTail, Skips, lines_from_end, lines_from_start
from rlkit.monitor.values import COUNT_MAX, count, number

# A step is 1-9 digits: `step:<5000 digits>` is no step line (and never reaches int()).
STEP_RE = re.compile(r"(?:^|[\s)\]])step:(\d{1,9}) - ")
# np.float64(0.1), np.int64(3), numpy.float32(1.0), tensor(0.5), tensor(0.5, device='cuda:0')
WRAPPED_RE = re.compile(r"^[A-Za-z_][\w.]*\(\s*([^,()]+?)\s*(?:,.*)?\)$")
STEP_BYTES_RE = re.compile(rb"step:\d{1,9} - ")
ELAPSED_KEYS = ("timing_s/step", "perf/time_per_step")
VALIDATION_PREFIXES = ("val-", "val/")
VALIDATION_KEYS = frozenset({"timing_s/testing"})
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
    record = json_value(text, max_depth=8)  # bounded: a marker nested 100,000 deep is no marker
    if not isinstance(record, dict) or record.get("event") != ATTEMPT_EVENT:
        return None
    from_step = count(record.get("from_step"))
    if from_step is None:
        return None
    text_of = {k: record[k][:4096] for k in ("time", "config") if isinstance(record.get(k), str)}
    return Attempt(count(record.get("attempt")) or 1, from_step, count(record.get("total_steps")) or None,
                   count(record.get("pid"), 2**32), **text_of)


def parse_value(text: str) -> float | None:
    text = text.strip()
    m = WRAPPED_RE.match(text)
    if m:
        text = m.group(1)
    if text in {"True", "np.True_"}:
        return 1.0
    if text in {"False", "np.False_"}:
        return 0.0
    if len(text) > 64:  # no printed float is longer
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return number(value)


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
        if value is not None and len(key) <= 200:
            data[key.strip()] = value
    return int(m.group(1)), data


def parse_jsonl_line(line: str) -> tuple[int, dict[str, float]] | None:
    """One verl file-logger record → (step, metrics): a step in 0..COUNT_MAX, each metric a finite number; None for
    a torn line of a killed run, or anything that is not a record."""
    record = json_value(line, max_depth=MAX_DEPTH)
    if not isinstance(record, dict):
        return None
    step = count(record.get("step"), COUNT_MAX)
    raw = record.get("data") or {}
    if step is None or not isinstance(raw, dict):
        return None
    data = {}
    for key, value in raw.items():
        value = number(value)
        if value is not None and len(key) <= 200:
            data[key] = value
    return step, data


def validation_only(data: dict[str, float]) -> bool:
    """A line of validation numbers alone (verl's `step:K - val-...` before training or at a resume)."""
    return bool(data) and all(k.startswith(VALIDATION_PREFIXES) or k in VALIDATION_KEYS for k in data)


def merged(earlier: dict[str, float] | None, later: dict[str, float]) -> dict[str, float]:
    """A step's record after `later` was logged: a validation-only line adds to the step's record, any other
    line replaces it (a step redone by a later attempt)."""
    return {**earlier, **later} if earlier and validation_only(later) else later


@dataclass
class StepMetrics:
    """Metrics per step, each from the latest attempt that logged it; the attempts seen."""

    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)

    def add(self, step: int, data: dict[str, float]) -> None:
        earlier = self.steps.pop(step, None)  # a step logged again goes to the end, in logging order
        self.steps[step] = merged(earlier, data)

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

    def __init__(self, paths: RunPaths, skips: Skips | None = None) -> None:
        self.paths = paths
        self.metrics = StepMetrics()
        self.source: Path | None = None
        self.skips = skips
        self._tail: LineTail | None = None
        self._parse = parse_jsonl_line

    def _pick(self) -> None:
        if self._tail is not None:
            return
        path = metrics_file(self.paths)
        if path is not None:
            parse = parse_jsonl_line if path.suffix == ".jsonl" else parse_console_line
            self.source, self._parse, self._tail = path, parse, LineTail(path, skips=self.skips)

    def poll(self, max_bytes: int | None = None) -> list[tuple[int, dict[str, float]]]:
        """What was appended since the last call (all of it; at most `max_bytes` of it when given)."""
        self._pick()
        if self._tail is None:
            return []
        new: list[tuple[int, dict[str, float]]] = []
        while True:
            start = self._tail.offset
            for line in self._tail.poll() if max_bytes is None else self._tail.poll(max_bytes):
                attempt = parse_attempt(line)
                if attempt is not None:
                    self.metrics.restart(attempt)
                    continue
                record = self._parse(line)
                if record is not None:
                    self.metrics.add(*record)
                    new.append(record)
            if max_bytes is not None or self._tail.offset == start:
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
        try:
            if path.is_file() and path.stat().st_size > 0:
                return path
        except (OSError, ValueError):  # a name too long, a NUL: no such log
            continue
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


def _tail_lines(path: Path, max_bytes: int, skips: Skips | None = None) -> Iterable[str]:
    """Step lines and attempt markers, last first."""
    if path.suffix == ".jsonl":
        return lines_from_end(path, skips=skips, max_bytes=max_bytes)
    return step_lines_from_end(path, max_bytes, marker=True, skips=skips)


def latest_attempt(paths: RunPaths, skips: Skips | None = None) -> Attempt | None:
    """The last line of logs/<exp>_attempts.jsonl (None for a run from before attempt markers)."""
    lines = lines_from_end(paths.attempts, skips=skips, max_bytes=256 << 20)
    return next((a for a in map(parse_attempt, _bounded(lines, 10_000)) if a is not None), None)


def tail(paths: RunPaths, n: int = 5, max_bytes: int = 256 << 20, max_lines: int = 10_000,
         skips: Skips | None = None) -> Tail:
    """The last `n` step records in effect, read from the end of the file in blocks (a 1 GB log costs its last
    blocks only; at most `max_bytes` / `max_lines` are looked through), and the latest attempt. Records read
    before reaching any marker are the latest attempt's."""
    path = metrics_file(paths)
    out = Tail([], latest_attempt(paths, skips))
    if path is None:
        return out
    parse = parse_jsonl_line if path.suffix == ".jsonl" else parse_console_line
    ceiling: int | None = None  # an attempt seen (reading backwards) voids earlier lines of steps above its from_step
    seen: set[int] = set()
    found: list[tuple[int, dict[str, float]]] = []
    for line in _bounded(_tail_lines(path, max_bytes, skips), max_lines):
        attempt = parse_attempt(line)
        if attempt is not None:
            if ceiling is None:  # the first marker from the end is the latest attempt's
                out.attempt, out.latest = attempt, len(found)
            ceiling = attempt.from_step if ceiling is None else min(ceiling, attempt.from_step)
            continue
        record = parse(line)
        if record is None or (ceiling is not None and record[0] > ceiling):
            continue
        if record[0] in seen:  # an earlier line of a step found: it counts under a validation-only later one
            at = next(i for i, (step, _) in enumerate(found) if step == record[0])
            if validation_only(found[at][1]):
                found[at] = (record[0], merged(record[1], found[at][1]))
            continue
        seen.add(record[0])
        found.append(record)
        if len(found) > n or (len(found) == n and not validation_only(record[1])):
            break  # (a validation-only n-th record reads on, to the training line of its step)
    found = found[:n]
    out.latest = len(found) if ceiling is None else min(out.latest, len(found))  # no marker: all the latest's
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


def step_lines_from_end(path: Path, max_bytes: int, chunk: int = 1 << 20, marker: bool = False,
                        skips: Skips | None = None) -> Iterable[str]:
    """Lines holding `step:N - ` (and with `marker`, attempt markers), last first: blocks are searched as bytes,
    so noise lines cost no decoding. A line longer than MAX_LINE is passed over, never joined (linear)."""
    try:
        f = open_regular(path)  # closed in finally; a FIFO or a device never blocks a reader
    except FileReadError:
        return
    try:
        pos = f.seek(0, 2)
        rest: bytes | None = b""  # the start of the line that began before `pos`; None: a line being skipped
        read = 0
        while pos > 0 and read < max_bytes:
            size = min(chunk, pos)
            pos -= size
            read += size
            f.seek(pos)
            block = f.read(size)
            cut = block.find(b"\n")
            if cut < 0 and pos > 0:  # all of it belongs to the line that goes on before it
                if rest is not None and len(rest) + size > MAX_LINE:
                    rest = None
                    if skips is not None:
                        skips.add(path)
                elif rest is not None:
                    rest = block + rest
                continue
            head, body = (block, b"") if cut < 0 else (block[:cut], block[cut:])
            if rest is None:  # the last piece of `body` ends the skipped line
                body = body[:body.rfind(b"\n") + 1] if body else b""
            else:
                body += rest
            if pos == 0:
                text, rest = (head + body) if (cut >= 0 or rest is not None) else body, b""
            else:
                text, rest = body, head if len(head) <= MAX_LINE else None
                if rest is None and skips is not None:
                    skips.add(path)
            yield from _step_lines(text, marker)
    finally:
        f.close()


def is_training_record(data: dict[str, float]) -> bool:
    """A step that trained, not verl's validation-only line (val_before_train logs `step:0 - val-core/...`)."""
    return any(not key.startswith(("val", "timing_s/testing")) for key in data)


def first_record(paths: RunPaths, latest: Attempt | None = None,
                 skips: Skips | None = None) -> tuple[int, dict[str, float]] | None:
    """The first training step's record near the start of the file (bounded: a run's first step is logged early).
    When the latest attempt restarted before that step (`latest.from_step` below it), the step was redone: its
    record is the latest attempt's, read from after that attempt's marker."""
    path = metrics_file(paths)
    if path is None:
        return None
    first = next((r for r in _records(lines_from_start(path, skips=skips)) if is_training_record(r[1])), None)
    if first is None or latest is None or latest.from_step >= first[0]:
        return first
    after, found = False, None
    for line in lines_from_start(path, max_bytes=256 << 20, skips=skips):
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


