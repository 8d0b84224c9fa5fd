"""Shared pytest setup. Each area's fixtures live in tests/fixtures/<area>.py."""

from __future__ import annotations

import os

import pytest

pytest_plugins = [
    "tests.fixtures.model",
    "tests.fixtures.docker",
    "tests.fixtures.vllm",
]

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
