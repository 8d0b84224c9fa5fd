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

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Whole runs first, the longest first, then everything else in file order. scripts/test.sh runs the
    suite on three workers with `--dist loadfile --no-loadscope-reorder`, and xdist hands files out in
    this order: the longest start at once and the short ones fill in, so the workers end together."""

    def cost(item: pytest.Item) -> float:
        mark = item.get_closest_marker("whole_run")
        return -float(mark.kwargs.get("seconds", 60)) if mark else 0.0

    items.sort(key=cost)  # stable: the rest keep their order


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
