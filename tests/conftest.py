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

# The files whose tests use the session's vLLM server (`vllm_server`, tests/fixtures/vllm.py). xdist
# hands them to one worker as one unit, so the suite boots that server once rather than once a worker
# (each boot ~20 cpu-s, ~2.4 GB), and its tests still use it one at a time (some read its counters).
VLLM_SERVER_FILES = frozenset({
    "tests/proxy/test_proxy_vllm.py",
    "tests/rollout/test_cli_rollout.py",
    "tests/rollout/test_engine_vllm.py",
    "tests/scaffolds/test_in_sandbox.py",
    "tests/train/test_bench_engine_steps.py",
    "tests/train/test_verl_agent_loop_worker.py",
})
VLLM_SERVER_UNIT = "vllm_server users"


def work_unit(nodeid: str) -> str:
    """What xdist hands a worker whole: the test's file, or all of VLLM_SERVER_FILES."""
    path = nodeid.split("::", 1)[0]
    return VLLM_SERVER_UNIT if path in VLLM_SERVER_FILES else path


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneVllmServer(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return OneVllmServer(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Whole runs first, the longest first, then everything else in file order. scripts/test.sh runs the
    suite on three workers with `--dist loadfile --no-loadscope-reorder`, and xdist hands files out in
    this order: the longest start at once and the short ones fill in, so the workers end together."""
    strays = sorted({item.nodeid.split("::", 1)[0] for item in items if "vllm_server" in getattr(item, "fixturenames", ())
                     and work_unit(item.nodeid) != VLLM_SERVER_UNIT})
    if strays:
        raise pytest.UsageError(f"{', '.join(strays)} use vllm_server: add them to VLLM_SERVER_FILES in tests/conftest.py")

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
