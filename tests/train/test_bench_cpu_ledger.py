"""bench/cpu_ledger.py: the CPU a stretch of work spent, by process group."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.fixtures.scripts import load_script


def test_a_spinning_child_and_this_process_are_charged_to_their_groups() -> None:
    with load_script("bench/cpu_ledger.py").CpuLedger() as ledger:
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 1.0: pass"])
        end = time.process_time() + 0.5
        while time.process_time() < end:  # this process: the benchmark's own rollout process
            pass
        child.wait(30)
    rollout = ledger.groups["rollout process (harbor, terminus, proxy)"]
    assert 0.4 <= rollout <= 1.5, ledger.groups
    assert ledger.groups["other"] >= 0.8, ledger.groups  # the spinner: a host process of no named group
    assert ledger.busy_s >= 1.4
    assert sum(ledger.groups.values()) >= ledger.busy_s - 1e-6  # what no group claims is "other"
    line = ledger.report(per=2)
    assert "cpu-s a trial" in line and "rollout process" in line
