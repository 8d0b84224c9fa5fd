"""The vLLM launcher's process handling, with a stand-in server script in place of vLLM.

The real server is covered by the `vllm_server` fixture and tests/proxy/test_proxy_vllm.py.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from rlkit.errors import LaunchError, UserError
from rlkit.launch.vllm import VllmServer, VllmServerConfig, build_command, vllm_python

# Prints a start-up line and two vLLM-style stats lines, spawns a grandchild, serves /health.
STANDIN = """#!/bin/sh
exec {python} -c '
import http.server, subprocess, sys, os
port = int(sys.argv[sys.argv.index("--port") + 1])
print("INFO starting vllm api server", flush=True)
print("INFO 11-29 [loggers.py:123] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 3.0 tokens/s", flush=True)
print("INFO route /v1/completions", flush=True)
print("WARNING expect low throughput on CPU", flush=True)
print("INFO 11-29 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.1 tokens/s", flush=True)
child = subprocess.Popen(["sleep", "600"])
open(os.environ["STANDIN_PIDFILE"], "w").write(str(child.pid))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
' "$@"
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_command_has_the_cpu_flags() -> None:
    cfg = VllmServerConfig(model_path="/m", max_model_len=4096, served_model_name="tiny")
    cmd = build_command(cfg, Path("/py"), 8123)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for flag in ("--dtype float32", "--enforce-eager", "--kv-cache-memory-bytes 134217728",
                 "--max-model-len 4096", "--port 8123", "--served-model-name tiny"):
        assert flag in joined


def test_vllm_streams_sixteen_tokens_a_chunk_unless_the_user_says_otherwise() -> None:
    cmd = build_command(VllmServerConfig(model_path="/m"), Path("/py"), 8123)
    assert cmd[cmd.index("--stream-interval") + 1] == "16"
    assert "--stream-interval" not in build_command(VllmServerConfig(model_path="/m", stream_interval=1), Path("/py"), 1)
    mine = build_command(VllmServerConfig(model_path="/m", extra_args=["--stream-interval", "4"]), Path("/py"), 1)
    assert mine[-2:] == ["--stream-interval", "4"]  # the last flag wins in vLLM's argparse


def test_missing_venv_is_a_user_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RLKIT_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(UserError) as err:
        vllm_python()
    assert err.value.key == "RLKIT_VLLM_PYTHON" and "setup.sh" in err.value.fix


def test_start_wait_logs_and_stop_the_whole_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "standin.sh"
    script.write_text(STANDIN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("STANDIN_PIDFILE", str(pidfile))
    config = VllmServerConfig(model_path="/m", exp_name="exp1", python=str(script), log_dir=tmp_path / "logs",
                              scratch_dir=tmp_path / "scratch", startup_timeout_s=60)
    with VllmServer(config) as server:
        assert server.healthy()
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        assert _alive(grandchild)
        assert (tmp_path / "scratch" / f"exp1_{server.port}" / "tmp").is_dir()
    assert not server.healthy()
    for _ in range(100):  # signal delivery to the group is asynchronous
        if not _alive(grandchild):
            break
        time.sleep(0.05)
    assert not _alive(grandchild)  # stopped with the process group, not orphaned
    full = (tmp_path / "logs" / "exp1_vllm_server.log").read_text()
    throughput = (tmp_path / "logs" / "exp1_vllm.log").read_text().splitlines()
    assert "starting vllm api server" in full and "low throughput" in full
    assert len(throughput) == 2 and all("Avg prompt throughput" in line for line in throughput)


def test_a_server_that_exits_early_is_a_launch_error(tmp_path: Path) -> None:
    script = tmp_path / "crash.sh"
    script.write_text("#!/bin/sh\necho 'ValueError: bad model' ; exit 3\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    config = VllmServerConfig(model_path="/m", exp_name="bad", python=str(script), log_dir=tmp_path,
                              scratch_dir=tmp_path / "s", startup_timeout_s=30, die_with_parent=False)
    with pytest.raises(LaunchError, match="exited with code 3"), VllmServer(config):
        pass
    assert "bad model" in (tmp_path / "bad_vllm_server.log").read_text()


def test_proxy_cli_rejects_bad_sampling_json(capsys: pytest.CaptureFixture[str]) -> None:
    from rlkit.cli.main import main

    code = main(["proxy", "serve", "--model-path", "/m", "--upstream", "http://127.0.0.1:1", "--sampling", "{oops"])
    assert code == 2
    err = capsys.readouterr().err
    assert "✗ FATAL" in err and "--sampling" in err and "Traceback" not in err


def test_every_server_shares_one_cache_and_keeps_its_own_scratch(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's content-keyed caches outlive a server: the next one skips its model inspection (8 s)."""
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    servers = [VllmServer(VllmServerConfig(model_path="/m", exp_name=name, port=port, scratch_dir=tmp_path / "scratch",
                                           cache_dir=tmp_path / "cache"))
               for name, port in (("a", 8101), ("b", 8102))]
    envs = [server._env() for server in servers]
    made = [folder for server in servers for folder in server.leftovers()]
    assert {env["VLLM_CACHE_ROOT"] for env in envs} == {str(tmp_path / "cache")}
    assert {env["TORCHINDUCTOR_CACHE_DIR"] for env in envs} == {str(tmp_path / "cache" / "inductor")}
    assert envs[0]["TMPDIR"] != envs[1]["TMPDIR"]  # sockets and temp files stay the server's own
    # a user's own vLLM cache is used as it is
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert servers[0]._env()["VLLM_CACHE_ROOT"] == str(tmp_path / "mine")
    for folder in [*made, *servers[0].leftovers()]:  # _env() made short TMPDIRs (tmp_path is long)
        shutil.rmtree(folder, ignore_errors=True)


def test_vllms_cpu_worker_gets_one_openmp_thread_per_spare_core_and_passive_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, vLLM's CPU worker would keep torch's every-core pool, and its spinning threads
    wait on each other while sandboxes keep the other cores busy (147 against 1,367 tokens/s)."""
    from rlkit.launch.vllm import omp_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert omp_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert omp_threads() == 15
    server = VllmServer(VllmServerConfig(model_path="/m", port=8103, scratch_dir=tmp_path / "s", cache_dir=tmp_path / "c"))
    env = server._env()
    assert env["OMP_NUM_THREADS"] == "15" and env["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's own setting is kept
    assert server._env()["OMP_NUM_THREADS"] == "4"
    for folder in server.leftovers():
        shutil.rmtree(folder, ignore_errors=True)
