"""Shared pytest setup. Each area's fixtures live in tests/fixtures/<area>.py.

Under `CI=true` a skipped test fails, naming what it missed (dockerd, the vLLM venv, chromium...):
CI must run every test, and a part that cannot start there is a broken setup, not a pass."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = [
    "tests.fixtures.model",
    "tests.fixtures.docker",
    "tests.fixtures.vllm",
]


def ci_forbids_skips() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and ci_forbids_skips() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"

# What scripts/test.sh builds beside the first tests (`rlkit images agents`, ~4 min on a fresh machine): a
# file that needs it runs after the rest, or its worker sits on the build's lock (50-88 s, three times).
LATE_FIXTURES = frozenset({"baked_images"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Whole runs first, the longest first, then everything else in file order, and last the files that
    need the agent images. scripts/test.sh runs the suite on three workers with `--dist loadfile
    --no-loadscope-reorder`, and xdist hands files out in this order: the longest start at once and the
    short ones fill in, so the workers end together."""
    late_files = {item.path for item in items if LATE_FIXTURES & set(getattr(item, "fixturenames", ()))}
    items.sort(key=lambda item: schedule_key(item, late_files))  # stable: the rest keep their order


def schedule_key(item: pytest.Item, late_files: set) -> tuple[int, float]:
    mark = item.get_closest_marker("whole_run")
    if mark:
        return 0, -float(mark.kwargs.get("seconds", 60))
    return (2 if item.path in late_files else 1), 0.0


OWNER_KEYS = ("RLKIT_OWNER_PID", "RLKIT_OWNER_START", "RLKIT_OWNER_PROJECT", "RLKIT_OWNER_EXPERIMENT")


@pytest.fixture(autouse=True)
def _ownership_stays_in_its_test():
    """A test that takes a run lock makes the test process the owner of what it starts (RLKIT_OWNER_*); a later
    test's sandboxes and servers must not inherit that owner, or a cleanup would judge them by the wrong one."""
    before = {key: os.environ.pop(key, None) for key in OWNER_KEYS}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
