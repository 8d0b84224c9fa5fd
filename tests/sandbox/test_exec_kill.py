"""Killing a command's process tree while it is still starting children (no docker needed:
both the host-side killer and the in-container bash one work on this host's /proc)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlkit.sandbox._exec_kill import kill_process_tree, process_tree
from rlkit.sandbox._exec_session import kill_tree_script


def _alive_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():  # zombies have none
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _kill_in_bash(pid: int) -> None:
    subprocess.run(["bash", "-c", kill_tree_script(pid)], check=True)


@pytest.mark.parametrize("kill", [kill_process_tree, _kill_in_bash], ids=["host", "bash"])
def test_a_tree_that_keeps_forking_leaves_no_child_behind(kill: Callable[[int], object]) -> None:
    # A unique sleep length marks this test's children; the parent forks one every 2 ms,
    # so forks land while the killer walks /proc.
    marker = f"{900 + uuid.uuid4().int % 99}.{uuid.uuid4().int % 10**6:06d}"
    proc = subprocess.Popen(["bash", "-c", f"for i in $(seq 2000); do sleep {marker} & sleep 0.002; done; wait"])
    try:
        for _ in range(200):
            if len(process_tree(proc.pid)) > 20:
                break
            time.sleep(0.01)
        kill(proc.pid)
        proc.wait(timeout=10)
        for _ in range(50):  # SIGKILL is delivered asynchronously
            if not _alive_with(marker):
                break
            time.sleep(0.05)
        assert _alive_with(marker) == []
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {marker}"], check=False)
        proc.kill()
