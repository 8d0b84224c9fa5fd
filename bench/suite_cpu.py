"""CPU seconds each test spends, with what it starts: a pytest plugin and its report.

The suite is CPU-bound on 2 cores (97% busy), so its wall time follows its CPU, and `--durations`
(wall time, shared cores) does not say which test to cut. Each worker samples itself and every
live descendant (vLLM servers, Ray's processes, CLI subprocesses, docker clients) with psutil
every 0.5 s and charges the growth to the test it is running (setup, call and teardown: a
session fixture is charged to the first test that needs it). A descendant that ends between two
samples loses at most its last 0.5 s; processes that leave the tree (containers, dockerd) are
not charged: the report gives the machine's busy time beside the sum.

    RLKIT_SUITE_CPU=/tmp/cpu.jsonl bash scripts/test.sh -- -p bench.suite_cpu
    .venv/bin/python bench/suite_cpu.py /tmp/cpu.jsonl [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

_OUT = os.environ.get("RLKIT_SUITE_CPU")
_lock = threading.Lock()
_current = ["(outside a test)"]
_charged: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def _kind(proc: psutil.Process, me: int) -> str:
    if proc.pid == me:
        return "pytest worker"
    try:
        cmd = " ".join(proc.cmdline())
        name = proc.name()
    except psutil.Error:
        return "gone"
    if "vllm" in cmd or "EngineCore" in name or "VLLM" in name:
        return "vllm"
    if name in ("raylet", "gcs_server") or "ray" in cmd.split("/")[-1:] or "ray/" in cmd or name.startswith("ray::"):
        return "ray"
    if name == "docker":
        return "docker cli"
    if "rlkit" in cmd:
        return "rlkit subprocess"
    return "other:" + name[:16]


def _sample_forever(me: int) -> None:
    from bench.cpu_ledger import tree_cpu_s

    seen: dict[int, tuple[str, float]] = {}
    root = psutil.Process(me)
    while True:
        for proc, used in tree_cpu_s(root):
            kind, before = seen.get(proc.pid, (None, 0.0))
            if kind is None:
                kind = _kind(proc, me)
            seen[proc.pid] = (kind, used)
            with _lock:
                _charged[_current[0]][kind] += max(0.0, used - before)
        time.sleep(0.5)


def pytest_configure(config: pytest.Config) -> None:
    in_worker = hasattr(config, "workerinput") or not (config.getoption("numprocesses", None) or 0)
    if _OUT and in_worker:
        threading.Thread(target=_sample_forever, args=(os.getpid(),), daemon=True, name="suite-cpu").start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with _lock:
        _current[0] = item.nodeid
    yield
    with _lock:
        _current[0] = "(between tests)"


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _OUT or not _charged:
        return
    time.sleep(0.6)  # one more sample of the last test's processes
    with _lock, open(_OUT, "a") as out:
        out.writelines(json.dumps({"test": nodeid, "cpu_s": dict(kinds)}) + "\n" for nodeid, kinds in _charged.items())


def report(path: Path, top: int) -> None:
    by_test: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    by_kind: collections.Counter[str] = collections.Counter()
    detail: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        total = sum(row["cpu_s"].values())
        by_test[row["test"]] += total
        by_file[row["test"].split("::")[0]] += total
        for kind, value in row["cpu_s"].items():
            key = kind if not kind.startswith("other:") else "other"
            by_kind[key] += value
            detail[row["test"]][key] += value
    whole = sum(by_test.values())
    print(f"charged to tests: {whole:,.0f} cpu-s")
    for kind, value in by_kind.most_common():
        print(f"  {kind:20s} {value:8.1f} cpu-s {value / whole:6.1%}")
    print(f"\nfiles, top {top}:")
    for name, value in by_file.most_common(top):
        print(f"  {value:7.1f} cpu-s {value / whole:6.1%}  {name}")
    print(f"\ntests, top {top}:")
    for name, value in by_test.most_common(top):
        parts = ", ".join(f"{k} {v:.0f}" for k, v in detail[name].most_common(4))
        print(f"  {value:7.1f} cpu-s  {name}\n           {parts}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    report(args.path, args.top)
    sys.exit(0)
