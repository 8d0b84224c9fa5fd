"""Servers rlkit launches (vLLM, the proxy) die with the process that started them, whatever starts them.

Real processes: an owner starts a command through `die_with_owner` in its own session, as VllmServer and
ProxyProcess do; the command forks a child that ignores SIGTERM, standing where vLLM's engine core stands
(forked after the API server, so a parent-death signal set on the server never reached it). The owner is
killed with SIGKILL, or its starting thread ends first while the owner lives on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from rlkit.launch.vllm import die_with_owner

# The "server": forks a stubborn child (SIGTERM ignored), prints both pids, then both sleep.
SERVER = ("import os, signal, sys, time\n"
          "pid = os.fork()\n"
          "if pid == 0:\n"
          "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
          "else:\n"
          "    print(os.getpid(), pid, flush=True)\n"
          "time.sleep(600)\n")
# The "owner": starts the server from a thread that then ends (PR_SET_PDEATHSIG would fire here), reports
# the session's id and the server's pids, and lives on.
OWNER = ("import json, subprocess, sys, threading, time\n"
         "from rlkit.launch.vllm import die_with_owner\n"
         "out = {}\n"
         "def start():\n"
         "    p = subprocess.Popen(die_with_owner([sys.executable, '-c', sys.argv[1]]), stdout=subprocess.PIPE,\n"
         "                         text=True, start_new_session=True)\n"
         "    out['session'] = p.pid\n"
         "    out['server'] = [int(x) for x in p.stdout.readline().split()]\n"
         "t = threading.Thread(target=start); t.start(); t.join()\n"
         "print(json.dumps(out), flush=True)\n"
         "time.sleep(600)\n")


def _session(sid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def test_a_launched_server_and_its_forked_child_die_within_15s_of_a_kill_9_of_their_owner() -> None:
    import json

    owner = subprocess.Popen([sys.executable, "-c", OWNER, SERVER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        started = json.loads(owner.stdout.readline())
        sid, (server, stubborn) = started["session"], started["server"]
        time.sleep(2)  # the starting thread is gone: the server must still run
        assert psutil.pid_exists(server) and psutil.pid_exists(stubborn)
        assert {server, stubborn} <= set(_session(sid))
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 15
        while _session(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session(sid) == [], "processes of the server's session outlived its owner"
    finally:
        owner.kill()


def test_a_server_stopped_by_its_owner_exits_with_its_own_code() -> None:
    proc = subprocess.run(die_with_owner([sys.executable, "-c", "import sys; sys.exit(3)"]), check=False,
                          start_new_session=True, timeout=60)
    assert proc.returncode == 3
