"""Shared pytest setup. Each area's fixtures live in tests/fixtures/<area>.py."""

pytest_plugins = [
    "tests.fixtures.model",
    "tests.fixtures.docker",
    "tests.fixtures.vllm",
]
