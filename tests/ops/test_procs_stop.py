"""ops.procs.stop: a dead run's leftovers go in Ray's own order, the raylet first and the GCS last."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from rlkit.ops import procs

# Stands in for a Ray daemon (the path in its argv is what the order reads): on SIGTERM it notes the
# time, takes `linger` seconds to exit (a raylet flushing), then notes the time again.
STAND_IN = """
import signal, sys, time
name, out, linger = sys.argv[1], sys.argv[2], float(sys.argv[3])
def term(*_):
    with open(out, "a") as f:
        f.write(f"{name} term {time.time()}\\n")
    time.sleep(linger)
    with open(out, "a") as f:
        f.write(f"{name} exit {time.time()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(out + "." + name, "w").close()
while True:
    time.sleep(0.05)
"""


def test_a_dead_runs_ray_is_stopped_raylet_first_gcs_last(tmp_path: Path) -> None:
    out = tmp_path / "events"
    started = {}
    for name, path, linger in (("gcs", "/v/ray/core/src/ray/gcs/gcs_server", 0.0),
                               ("raylet", "/v/ray/core/src/ray/raylet/raylet", 0.6),
                               ("monitor", "/v/ray/autoscaler/_private/monitor.py", 0.3)):
        proc = subprocess.Popen([sys.executable, "-c", STAND_IN, name, str(out), str(linger), path])
        started[name] = proc
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"events.{n}").exists() for n in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    leftovers = []
    for name in ("gcs", "monitor", "raylet"):  # as a scan may list them
        live = psutil.Process(started[name].pid)
        leftovers.append(procs.Proc(live.pid, live.create_time(), "ray", " ".join(live.cmdline()), "me", True, "test"))

    stopped, errors = procs.stop(leftovers)

    assert errors == [] and sorted(p.pid for p in stopped) == sorted(p.pid for p in started.values())
    assert all(p.wait(5) == 0 for p in started.values())  # each exited on SIGTERM, none was killed
    events = {tuple(line.split()[:2]): float(line.split()[2]) for line in out.read_text().splitlines()}
    assert events[("raylet", "exit")] <= events[("monitor", "term")]  # the raylet is gone before the rest
    assert events[("monitor", "exit")] <= events[("gcs", "term")]  # and the GCS goes last


def test_the_vllm_launchers_command_line_reads_as_one_vllm_line() -> None:
    """The launcher runs vLLM's API server through a multi-line `python -c` program: cleanup and status
    still see a vLLM server, and a report line shows it on one line, module name first."""
    from rlkit.launch.vllm import _FORK_ENGINE_CORE

    class Launched:
        def cmdline(self) -> list[str]:
            return ["/venv/bin/python", "-c", _FORK_ENGINE_CORE, "--model", "/m", "--port", "8000"]

    line = procs.cmdline(Launched())
    assert "\n" not in line and line.startswith("/venv/bin/python -c import os, runpy # vllm.entrypoints.openai")
    assert procs.kind_of(line) == "vllm"
