"""`rlkit images build --scaffold NAME`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlkit.cli.main import main
from tests.scaffolds.conftest import TASK_DIR


def test_unknown_scaffold_is_a_fatal_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "build", str(TASK_DIR), "--no-base", "--scaffold", "opencode"]) == 2
    err = capsys.readouterr().err
    assert "✗ FATAL" in err and "unknown scaffold 'opencode'" in err and "Traceback" not in err


@pytest.mark.docker
@pytest.mark.slow  # the first run bakes every agent image
def test_build_bakes_the_scaffold_layer(baked_images: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "build", str(TASK_DIR), "--scaffold", "oc",
                           "--bake"], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "rlkit-task/calc-power-unary:oc" in proc.stdout and "1/1 images ready" in proc.stdout


@pytest.mark.docker
@pytest.mark.slow  # the first run builds every agent image
def test_build_prepares_one_volume_for_every_task(agent_images: dict[str, str]) -> None:
    """By default the agent is mounted: the task image is left as built, the agent's volume is made once."""
    proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "build", str(TASK_DIR), "--scaffold", "oc"],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "rlkit-task/calc-power-unary:latest" in proc.stdout and ":oc" not in proc.stdout
    assert "1/1 images ready" in proc.stdout
    assert "✓ oc: volume rlkit-agent-oc-" in proc.stderr and "stored once" in proc.stderr


@pytest.mark.docker
@pytest.mark.slow  # the first run bakes every agent image
def test_agents_builds_or_finds_each_agent_image(baked_images: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "agents", "cc", "oc"],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    refs = proc.stdout.split()
    assert [ref.split(":")[0] for ref in refs] == ["rlkit/agent-cc", "rlkit/agent-oc"]
    for ref in refs:
        assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False).returncode == 0


def test_agents_refuses_an_agent_that_runs_on_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "agents", "terminus"]) == 2
    err = capsys.readouterr().err
    assert "✗ FATAL" in err and "not baked into images" in err and "Traceback" not in err
