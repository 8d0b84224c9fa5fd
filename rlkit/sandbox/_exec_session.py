"""The container's keep-alive process doubles as a shell that runs commands for us.

Every `docker exec` costs a runc process start (~50 ms here); a trial pays it for each
verifier step and every agent tool call. Instead, the container's main process (the
one that keeps it alive) is a small bash loop reading requests on its stdin, which the
backend holds through `docker attach`:

    hello:    "H <dir>\\n" (ready) or "N\\n" (no base64/mktemp here: use docker exec)
    request:  "<id> <script, control bytes/spaces/backslashes as \\0NNN>\\n"
    answers:  "S <id> <pid>\\n"                               (command started)
              "R <id> <exit code> <base64 stdout> <base64 stderr>\\n"   (command done)

Being the keep-alive (the first child of the container's init), it is spared by clean-up
code that kills "every process but init and the keep-alive". One command at a time: a
caller that finds the session busy, a command for another user, or a session that is
gone uses a plain `docker exec`. When stdin closes, the loop turns into `sleep infinity`.
"""

from __future__ import annotations

import base64
import itertools
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlkit.sandbox._exec_kill import KILL_TREE_BASH

# The helpers the loop runs after every command are looked up once, at boot, before any agent
# ran: a command an agent later puts earlier on PATH is never run by the loop.
_SERVER = r"""exec 2>/dev/null
b64=$(command -v base64) && rmf=$(command -v rm) && mkt=$(command -v mktemp)
if [ -n "$b64" ] && [ -n "$rmf" ] && d=$("$mkt" -d); then
  echo "H $d"
  while IFS=' ' read -r id payload; do
    printf -v script '%b' "$payload"  # a builtin: decoding costs no process
    # Files per request: a background process the command left behind keeps writing
    # into its own (then deleted) files, never into the next command's output.
    # A forked subshell, not `bash -c`: the script ends in `exec <bash> -c`, so one bash starts.
    ( eval "$script" ) >"$d/$id.o" 2>"$d/$id.e" </dev/null &
    pid=$!
    echo "S $id $pid"
    wait "$pid"; rc=$?
    # Empty outputs (most stderr, many stdout) cost no base64 process.
    o=; e=
    [ -s "$d/$id.o" ] && o=$("$b64" -w0 <"$d/$id.o")
    [ -s "$d/$id.e" ] && e=$("$b64" -w0 <"$d/$id.e")
    echo "R $id $rc $o $e"
    "$rmf" -f "$d/$id.o" "$d/$id.e"
  done
else
  echo N
fi
exec sleep infinity
"""
# sh first: an image without bash still gets a keep-alive (and docker exec for commands).
_BOOT = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; fi; exec sleep infinity'
HELLO_TIMEOUT_SEC = 30.0
POLL_SEC = 0.2


_NEEDS_ESCAPE = re.compile(rb"[\x00-\x20\x7f\\]")


def encode_script(script: str) -> bytes:
    """One request line for the session: every control byte, space and backslash as
    `\\0NNN`, which the loop's `printf %b` (a bash builtin) turns back into the script."""
    return _NEEDS_ESCAPE.sub(lambda m: b"\\0%03o" % m[0][0], script.encode())


def keepalive_command() -> list[str]:
    """The container command: the session loop, or `sleep infinity` when bash is missing."""
    return ["sh", "-c", _BOOT, _SERVER]


def build_script(command: str, cwd: str | None, env: dict[str, str] | None, shell: str = "bash") -> str:
    """What `docker exec -w CWD -e K=V ... SHELL -c COMMAND` runs, as one bash line."""
    parts = []
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)} || exit 126")
    parts += [f"export {key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    parts.append(f"exec {shlex.quote(shell)} -c {shlex.quote(command)}")
    return "; ".join(parts)


def kill_tree_script(pid: int) -> str:
    """Pure-bash SIGKILL of `pid` and its descendants (no procps needed in the image)."""
    return KILL_TREE_BASH + f"kill_tree {int(pid)}; true"


@dataclass
class SessionResult:
    stdout: bytes
    stderr: bytes
    return_code: int | None  # None: deadline passed or cancelled; `pid` may still run
    pid: int | None


class SessionBroken(Exception):
    """The session is unusable (no hello, stream closed, bad answer); use docker exec."""


class ExecSession:
    """The attached keep-alive shell of one container. `run` blocks: call it from a worker thread."""

    def __init__(self, attached: Any) -> None:
        self._sock = attached
        self._raw = getattr(attached, "_sock", attached)
        self._raw.setblocking(True)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._buffer = b""
        self._pending = b""
        self._lines: list[str] = []
        self._ready = False
        self._stale: str | None = None  # an abandoned request whose answer is still to come
        self._cancel = threading.Event()
        self.broken = False

    def close(self) -> None:
        self.broken = True
        try:
            self._raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for closer in (getattr(self._sock, "close", None), getattr(self._raw, "close", None)):
            if closer is not None:
                try:
                    closer()
                except OSError:
                    pass

    def try_acquire(self) -> bool:
        """Take the session for one command; False when busy or broken (use docker exec)."""
        if self.broken:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        self._cancel.clear()
        return True

    def release(self) -> None:
        self._lock.release()

    def run_and_release(self, script: str, deadline: float | None,
                        on_start: Callable[[int], None] | None = None) -> SessionResult:
        """`run`, then give the session back — from the worker thread, so an awaiting task
        that was cancelled can't hand it to the next command while this thread still reads."""
        try:
            return self.run(script, deadline, on_start)
        finally:
            self.release()

    def cancel(self) -> None:
        """Make a blocked `run` return soon (its command is abandoned, not killed)."""
        self._cancel.set()

    # ---- one command (the caller holds the session) -----------------------------------------
    def run(self, script: str, deadline: float | None, on_start: Callable[[int], None] | None = None
            ) -> SessionResult:
        try:
            if not self._ready:
                hello = self._read_line(time.monotonic() + HELLO_TIMEOUT_SEC)
                if not hello.startswith("H /"):
                    raise SessionBroken(f"no exec session in this container ({hello[:40]!r})")
                self._ready = True
            if self._stale is not None:
                self._drain(self._stale)
            request_id = str(next(self._ids))
            self._raw.sendall(request_id.encode() + b" " + encode_script(script) + b"\n")
            started = self._read_line(None if deadline is None else max(deadline, time.monotonic() + 30))
            tag, rid, pid = (started.split(" ") + ["", "", ""])[:3]
            if tag != "S" or rid != request_id or not pid.isdigit():
                raise SessionBroken(f"unexpected answer {started[:80]!r}")
            if on_start is not None:
                on_start(int(pid))
            try:
                done = self._read_line(deadline)
            except TimeoutError:
                self._stale = request_id  # its R line comes once the command is killed
                return SessionResult(b"", b"", None, int(pid))
            parts = done.split(" ")
            if len(parts) != 5 or parts[0] != "R" or parts[1] != request_id:
                raise SessionBroken(f"unexpected answer {done[:80]!r}")
            return SessionResult(base64.b64decode(parts[3]), base64.b64decode(parts[4]), int(parts[2]), int(pid))
        except SessionBroken:
            self.close()
            raise
        except TimeoutError as exc:
            self.close()
            raise SessionBroken("the session stopped answering") from exc
        except (OSError, ValueError) as exc:
            self.close()
            raise SessionBroken(str(exc)) from exc

    def _drain(self, request_id: str) -> None:
        deadline = time.monotonic() + HELLO_TIMEOUT_SEC
        while not self._read_line(deadline).startswith(f"R {request_id} "):
            pass
        self._stale = None

    def _read_line(self, deadline: float | None) -> str:
        while not self._lines:
            self._fill(deadline)
        return self._lines.pop(0)

    def _fill(self, deadline: float | None) -> None:
        """Read docker's multiplexed frames (8-byte header: stream, 0, 0, 0, size) into lines."""
        while True:
            if self._cancel.is_set():
                raise TimeoutError("cancelled")
            wait = POLL_SEC if deadline is None else min(POLL_SEC, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._raw], [], [], wait)
            if ready:
                break
        chunk = self._raw.recv(65536)
        if not chunk:
            raise SessionBroken("the keep-alive shell's stream closed")
        self._buffer += chunk
        text = b""
        while len(self._buffer) >= 8:
            size = int.from_bytes(self._buffer[4:8], "big")
            if len(self._buffer) < 8 + size:
                break
            if self._buffer[0] == 1:  # stdout
                text += self._buffer[8:8 + size]
            self._buffer = self._buffer[8 + size:]
        if text:
            *complete, self._pending = (self._pending + text).split(b"\n")
            self._lines.extend(line.decode() for line in complete)
