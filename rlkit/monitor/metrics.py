"""A run's step metrics from the files a trainer writes, whichever trainer wrote them.

Two sources, one shape (`StepMetrics`: step -> {metric: float}):
  logs/<exp>.jsonl   verl's file logger: `{"step": N, "data": {...}}` per line
  logs/<exp>.log     verl's console lines: `step:N - key:value - ...`; values as Python
                     prints them (`0.12`, `np.float64(0.12)`, `np.int64(3)`, `tensor(0.5)`,
                     `nan`); lines may carry a prefix (Ray's `(TaskRunner pid=..)`) and the
                     file holds everything else the trainer printed
The JSONL file wins when it has records; the console log is the fallback (a verl run whose
stdout was redirected). Reads are incremental (`MetricsReader.poll`).
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
    """Metrics per step, in the order steps were logged; a step logged twice (a resume) keeps the last."""

    steps: dict[int, dict[str, float]] = field(default_factory=dict)

    def add(self, step: int, data: dict[str, float]) -> None:
        self.steps[step] = data

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
        new = [r for r in map(self._parse, self._tail.poll()) if r is not None]
        for step, data in new:
            self.metrics.add(step, data)
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


def last_records(paths: RunPaths, n: int = 5, max_bytes: int = 256 << 20) -> list[tuple[int, dict[str, float]]]:
    """The last `n` step records, read from the end of the file in blocks (a 1 GB log costs its last blocks only;
    at most `max_bytes` are looked through)."""
    path = metrics_file(paths)
    if path is None:
        return []
    if path.suffix == ".jsonl":
        found = [r for r in (parse_jsonl_line(x) for x in _bounded(lines_from_end(path), n * 4)) if r is not None]
        return found[:n][::-1]
    out: list[tuple[int, dict[str, float]]] = []
    for line in step_lines_from_end(path, max_bytes):
        record = parse_console_line(line)
        if record is not None:
            out.append(record)
            if len(out) >= n:
                break
    return out[::-1]


def _step_lines(block: bytes) -> list[str]:
    """Whole lines of `block` holding a step record, last first (a literal search, then the line around it)."""
    out, last_start = [], -1
    for m in STEP_BYTES_RE.finditer(block):
        start = block.rfind(b"\n", 0, m.start()) + 1
        if start == last_start:
            continue
        end = block.find(b"\n", m.end())
        out.append(block[start:end if end >= 0 else len(block)].decode("utf-8", "replace"))
        last_start = start
    return out[::-1]


def step_lines_from_end(path: Path, max_bytes: int, chunk: int = 1 << 20) -> Iterable[str]:
    """Lines holding `step:N - `, last first: blocks are searched as bytes, so noise lines cost no decoding."""
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
            yield from _step_lines(block)
    finally:
        f.close()


def is_training_record(data: dict[str, float]) -> bool:
    """A step that trained, not verl's validation-only line (val_before_train logs `step:0 - val-core/...`)."""
    return any(not key.startswith(("val", "timing_s/testing")) for key in data)


def first_record(paths: RunPaths) -> tuple[int, dict[str, float]] | None:
    """The first training step's record near the start of the file (bounded: a run's first step is logged early)."""
    path = metrics_file(paths)
    if path is None:
        return None
    return next((r for r in _records(lines_from_start(path)) if is_training_record(r[1])), None)


def _bounded(lines: Iterable[str], limit: int) -> Iterable[str]:
    for i, line in enumerate(lines):
        if i >= limit:
            return
        yield line


def read_all(paths: RunPaths) -> StepMetrics:
    reader = MetricsReader(paths)
    reader.poll()
    return reader.metrics


