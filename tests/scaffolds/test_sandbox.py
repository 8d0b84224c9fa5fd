"""The docker sandbox variant for in-container agents: harbor's proxy allowlist is
served with host networking when, and only when, every allowed host is loopback."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rlkit.scaffolds.sandbox import ProxyDockerEnvironment, is_loopback
from rlkit.tasks.images import task_image_ref
from tests.scaffolds.conftest import TASK_DIR


def _env(tmp_path: Path, hosts: list[str]) -> ProxyDockerEnvironment:
    from harbor.models.task.config import NetworkMode, NetworkPolicy
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths

    task = Task(TASK_DIR)
    paths = TrialPaths(tmp_path / uuid.uuid4().hex[:6])
    paths.mkdir()
    policy = NetworkPolicy(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=hosts)
    return ProxyDockerEnvironment(environment_dir=task.paths.environment_dir, environment_name=task.name,
                                  session_id="s", trial_paths=paths, task_env_config=task.config.environment,
                                  network_policy=policy, image=task_image_ref(task.name))


def test_loopback_names_and_addresses() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["10.0.0.1", "pypi.org", "0.0.0.0", "proxy.rlkit.svc"]))


def test_proxy_allowlist_runs_with_host_network(tmp_path: Path) -> None:
    env = _env(tmp_path, ["127.0.0.1"])
    assert env.network_mode() == "host"
    assert env.capabilities.network_allowlist and env.capabilities.mounted


def test_other_allowlists_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loopback"):
        _env(tmp_path, ["127.0.0.1", "pypi.org"])
