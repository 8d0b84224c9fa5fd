"""Which processes spent the machine's CPU during a stretch of a benchmark.

    with CpuLedger() as ledger:
        run_the_step()
    print(ledger.report(per=trials))

psutil samples every process's CPU seconds every 0.2 s (a process that ends between two
samples loses at most its last 0.2 s); the sandboxes' processes are counted once, from
docker's cgroup (cgroup v1 `cpuacct`, or v2 `cpu.stat` under the cgroupfs driver), whose
counter keeps the CPU of containers already removed. The machine's own busy time (/proc/stat)
is the total; what no group claims is "other" (the kernel, short-lived host processes, and
the sandboxes where no docker-only cgroup counts them).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path
from typing import Self

import psutil

# Parents that hold only docker's containers. Under systemd's cgroup driver they sit in
# system.slice beside every service (dockerd too): no such parent, so no count (None).
_DOCKER_CGROUPS = (Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage"),  # v1: nanoseconds
                   Path("/sys/fs/cgroup/docker/cpu.stat"))  # v2, cgroupfs driver: usage_usec


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy since boot (every core)."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def containers_cpu_s() -> float | None:
    """CPU seconds of every docker container, live or removed, or None where no cgroup says."""
    for path in _DOCKER_CGROUPS:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpuacct.usage":
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
    return None


def _in_container(proc: psutil.Process) -> bool:
    try:
        return "docker" in Path(f"/proc/{proc.pid}/cgroup").read_text()
    except OSError:
        return False


def tree_cpu_s(root: psutil.Process) -> list[tuple[psutil.Process, float]]:
    """Each live process of `root`'s tree (root first) with its CPU seconds so far (user + system)."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = [root]
    out = []
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        out.append((proc, times.user + times.system))
    return out


def process_group(proc: psutil.Process) -> str | None:
    """A host process's group, or None for a container's (counted from docker's cgroup)."""
    if proc.pid == os.getpid():
        return "rollout process (harbor, terminus, proxy)"
    if _in_container(proc):
        return None
    try:
        cmd, name = " ".join(proc.cmdline()), proc.name()
    except psutil.Error:
        return "other"
    if "EngineCore" in cmd or "EngineCore" in name:
        return "vLLM engine core"
    if "vllm.entrypoints" in cmd or "api_server" in cmd:
        return "vLLM API server"
    if name in ("dockerd", "containerd", "runc", "docker-proxy") or name.startswith("containerd-shim"):
        return "docker daemons"
    return "other"


class CpuLedger:
    """CPU seconds by process group between `__enter__` and `__exit__`."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self._last: dict[int, tuple[str | None, float]] = {}
        self._start: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.groups: collections.Counter[str] = collections.Counter()
        self.busy_s = self.wall_s = 0.0
        self.containers_s: float | None = None

    def _sample(self, first: bool = False) -> None:
        for proc in psutil.process_iter():
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            known = self._last.get(proc.pid)
            self._last[proc.pid] = (known[0] if known else process_group(proc), used)
            if first:
                self._start[proc.pid] = used

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> Self:
        self._sample(first=True)
        self._busy0, self._containers0, self._t0 = machine_busy_s(), containers_cpu_s(), time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="cpu-ledger", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.wall_s = time.monotonic() - self._t0
        self.busy_s = machine_busy_s() - self._busy0
        now = containers_cpu_s()
        self.containers_s = None if now is None or self._containers0 is None else now - self._containers0
        for pid, (group, used) in self._last.items():
            if group is not None:
                self.groups[group] += used - self._start.get(pid, 0.0)
        if self.containers_s is not None:
            self.groups["sandboxes (containers)"] = self.containers_s
        self.groups["other"] += max(0.0, self.busy_s - sum(self.groups.values()))

    def share(self, group: str, per: int) -> float:
        return self.groups.get(group, 0.0) / per

    def report(self, per: int) -> str:
        """One line: the machine's CPU per unit (trial) and its split by group."""
        cores = psutil.cpu_count() or 1
        parts = ", ".join(f"{name} {seconds / per:.2f}" for name, seconds in self.groups.most_common()
                          if seconds / per >= 0.005)
        return (f"{self.busy_s / per:.2f} cpu-s a trial (machine {self.busy_s / (self.wall_s * cores):.0%} busy "
                f"on {cores} cores): {parts}")
