"""The token-recording proxy as a child process (`rlkit proxy serve`), with its session API over HTTP.

A child process keeps the proxy's event loop away from a trainer that holds the GIL for
seconds (tensor work, tokenizing), so agents' calls never queue behind it. The methods
mirror `rlkit.proxy.BackgroundProxy`, so callers need not know which one runs.

    with ProxyProcess(ProxyConfig(model_path=..., upstreams=[vllm_url], port=0), log=path) as proxy:
        base = proxy.openai_base_url("trial-1")
        record = proxy.close_session("trial-1")
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

from rlkit.launch._http import HttpStatusError, get_json, post_json
from rlkit.launch.vllm import die_with_owner, startup_error, supervised_pid
from rlkit.proxy.core import ProxyConfig

# serve_forever's first line: "rlkit proxy on http://HOST:PORT  (OpenAI base ...)"
_READY_LINE = re.compile(r"rlkit proxy on (http://\S+)")


def serve_command(config: ProxyConfig, python: str = sys.executable) -> list[str]:
    """`rlkit proxy serve` arguments for a ProxyConfig (only values that differ from its defaults)."""
    cmd = [python, "-m", "rlkit.cli.main", "proxy", "serve", "--model-path", config.model_path,
           "--host", config.host, "--port", str(config.port), "--tool-call-parser", config.tool_call_parser,
           "--max-model-len", str(config.max_model_len)]
    for upstream in config.upstreams:
        cmd += ["--upstream", upstream]
    optional = {"--served-model-name": config.served_model_name, "--max-response-tokens": config.max_response_tokens,
                "--max-calls-per-session": config.max_calls_per_session,
                "--max-response-tokens-per-session": config.max_response_tokens_per_session}
    optional |= {"--first-token-timeout": config.first_token_timeout_s, "--token-timeout": config.token_timeout_s}
    for flag, value in optional.items():
        if value is not None:
            cmd += [flag, str(value)]
    if config.default_sampling:
        cmd += ["--sampling", json.dumps(config.default_sampling)]
    if config.strict_parser_check:
        cmd.append("--strict-parser-check")
    if not config.warm_anthropic:
        cmd.append("--no-anthropic-warm-up")
    return cmd


class ProxyProcess:
    """`rlkit proxy serve` in its own process group; stopped (and killed if need be) on exit."""

    def __init__(self, config: ProxyConfig, *, log: Path, startup_timeout_s: float = 120.0,
                 die_with_parent: bool = True) -> None:
        self.config = config
        self.log = log
        self.startup_timeout_s = startup_timeout_s
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._ready = threading.Event()
        self._pump: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the proxy is not started")
        return self._url

    def start(self) -> ProxyProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = serve_command(self.config)
        if self.die_with_parent:  # no orphan proxy after the starter dies
            command = die_with_owner(command)
        from rlkit.config.owner import owner_env

        env = dict(os.environ, PYTHONUNBUFFERED="1", **owner_env())  # cleanup traces orphans to their owner
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._pump = threading.Thread(target=self._pump_log, name="proxy-log", daemon=True)
        self._pump.start()
        return self

    def _pump_log(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.log, "ab") as out:
            for line in iter(self.process.stdout.readline, b""):
                out.write(line)
                out.flush()
                if self._url is None and (m := _READY_LINE.search(line.decode(errors="replace"))):
                    self._url = m.group(1)
                    self._ready.set()
        self._ready.set()  # the process ended: wake the waiter

    @property
    def server_pid(self) -> int | None:
        """The proxy's own pid (what its /health says): behind the supervisor, the supervisor's child."""
        if self.process is None:
            return None
        return supervised_pid(self.process.pid) if self.die_with_parent else self.process.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._ready.wait(0.2):
            if time.monotonic() > deadline:
                raise startup_error(f"the proxy did not start within {self.startup_timeout_s:.0f}s", self.log)
        if self._url is None:
            assert self.process is not None
            code = self.process.wait(10)
            if self._pump is not None:
                self._pump.join(timeout=5)
            raise startup_error(f"the proxy exited with code {code} during start-up", self.log)

    def stop(self, grace_s: float = 10.0) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None:
            try:  # anything the proxy started, also when it died by itself
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._pump is not None:
            self._pump.join(timeout=5)

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

    # session API, as on BackgroundProxy
    def openai_base_url(self, session_id: str) -> str:
        return f"{self.url}/s/{session_id}/v1"

    def anthropic_base_url(self, session_id: str) -> str:
        return f"{self.url}/s/{session_id}"

    def trajectory(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        return _none_if_404(get_json, f"{self.url}/s/{session_id}/trajectory?calls={calls}")

    def close_session(self, session_id: str, *, calls: str = "full") -> dict[str, Any] | None:
        return _none_if_404(post_json, f"{self.url}/s/{session_id}/close?calls={calls}")

    def set_session_sampling(self, session_id: str, overrides: dict[str, Any], *, replace: bool = False) -> None:
        post_json(f"{self.url}/s/{session_id}/sampling" + ("?replace=1" if replace else ""), overrides)

    def set_session_limits(self, session_id: str, *, max_calls: int | None = None,
                           max_response_tokens: int | None = None) -> dict[str, int]:
        answer = post_json(f"{self.url}/s/{session_id}/limits",
                           {"max_calls": max_calls, "max_response_tokens": max_response_tokens})
        return answer["limits"]


def _none_if_404(call: Any, url: str) -> Any:
    try:
        return call(url)
    except HttpStatusError as exc:
        if exc.status == 404:
            return None
        raise
