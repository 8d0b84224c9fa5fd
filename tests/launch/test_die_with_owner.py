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


# A stand-in for vLLM's API server module (run by the real launcher, `VllmServer`, through its fork prelude):
# it forks an "engine core" that ignores SIGTERM, then answers /health and /v1/models for the proxy.
STANDIN_API_SERVER = """import http.server, json, os, signal, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
name = sys.argv[sys.argv.index("--served-model-name") + 1]
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": name, "max_model_len": 4096}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
# The owner: starts vLLM (the stand-in) and the real `rlkit proxy serve` through the real launchers, from a
# thread that then ends; the proxy's health probe must know the proxy's own pid behind the supervisor.
LAUNCHER_OWNER = ("import json, sys, threading, time\n"
                  "from pathlib import Path\n"
                  "from rlkit.launch.proxy_process import ProxyProcess\n"
                  "from rlkit.launch.vllm import VllmServer, VllmServerConfig\n"
                  "from rlkit.proxy.core import ProxyConfig\n"
                  "from rlkit.proxy.health import probe_proxy\n"
                  "tmp, model = Path(sys.argv[1]), sys.argv[2]\n"
                  "def start():\n"
                  "    vllm = VllmServer(VllmServerConfig(model_path=model, served_model_name='policy', exp_name='own',\n"
                  "        python=sys.executable, log_dir=tmp / 'logs', scratch_dir=tmp / 'scratch', startup_timeout_s=120,\n"
                  "        env={'PYTHONPATH': str(tmp / 'standin')})).start()\n"
                  "    vllm.wait_ready()\n"
                  "    proxy = ProxyProcess(ProxyConfig(model_path=model, upstreams=[vllm.base_url],\n"
                  "        served_model_name='policy', port=0), log=tmp / 'logs' / 'proxy.log').start()\n"
                  "    proxy.wait_ready()\n"
                  "    probe_proxy(proxy.url, 'policy', pid=proxy.server_pid, wait_s=30)\n"
                  "t = threading.Thread(target=start); t.start(); t.join()\n"
                  "print('READY', flush=True)\n"
                  "time.sleep(600)\n")


def test_the_real_launchers_leave_nothing_within_15s_of_a_kill_9_of_their_owner(tmp_path, tiny_model_dir) -> None:
    """`VllmServer` and `ProxyProcess` as every caller uses them (the local trainer, the verl CPU replica,
    `rlkit rollout`): started from a thread that ends, probed by the proxy's own pid, gone with their owner."""
    package = tmp_path / "standin" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(STANDIN_API_SERVER)
    owner = subprocess.Popen([sys.executable, "-c", LAUNCHER_OWNER, str(tmp_path), str(tiny_model_dir)],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert owner.stdout.readline().strip() == "READY", (tmp_path / "logs" / "proxy.log").read_text()
        launched = psutil.Process(owner.pid).children(recursive=True)
        time.sleep(2)  # the starting thread is gone: everything must still run
        assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in launched)
        names = " ".join(" ".join(p.cmdline()) for p in launched)
        assert "vllm.entrypoints.openai.api_server" in names and "proxy serve" in names
        assert len(launched) >= 5  # vLLM's supervisor, server and "engine core"; the proxy's supervisor and proxy
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in launched):
            time.sleep(0.5)
        assert [p.pid for p in launched if _alive(p)] == [], "launched processes outlived their owner"
    finally:
        owner.kill()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
