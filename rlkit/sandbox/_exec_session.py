"""A long-lived root shell inside a container that runs commands without a `docker exec` each.

Every `docker exec` costs a runc process start (~50 ms here); a trial pays it for each
verifier step and every agent tool call. The session is one exec, made on first use,
whose bash reads requests on stdin and answers on stdout:

    hello:    "H <dir>\\n"                                  (once: where outputs are kept)
    request:  "<id> <base64 script>\\n"
    answers:  "S <id> <pid>\\n"                               (command started)
              "R <id> <exit code> <base64 stdout> <base64 stderr>\\n"   (command done)

One command at a time: a caller that finds the session busy (or a command for another
user, or an image without bash/base64) uses a plain `docker exec`. A command past its
deadline returns its pid so the caller can kill it; the session is then discarded.

The command runs in its own shell (`eval`, pid <pid>), which writes its exit code to
<dir>/<id>.rc and its output to <dir>/<id>.o/.e itself. So when something kills the
session's shell mid-command (a verifier that kills every leftover process, say), the
command still finishes and `recover_script` collects its result: it never runs twice.
"""

from __future__ import annotations

import base64
import itertools
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

_SERVER = r"""exec 2>/dev/null
d=$(mktemp -d /tmp/.rlkit-exec.XXXXXX) || exit 1
echo "H $d"
while IFS=' ' read -r id b64; do
  script=$(printf %s "$b64" | base64 -d)
  RLKIT_RC="$d/$id.rc" bash -c "$script" >"$d/$id.o" 2>"$d/$id.e" </dev/null &
  pid=$!
  echo "S $id $pid"
  wait "$pid"; rc=$?
  echo "R $id $rc $(base64 -w0 <"$d/$id.o") $(base64 -w0 <"$d/$id.e")"
  rm -f "$d/$id.o" "$d/$id.e" "$d/$id.rc"
done
"""


@dataclass
class SessionResult:
    stdout: bytes
    stderr: bytes
    return_code: int | None  # None: the deadline passed; `pid` is still running
    pid: int | None


class SessionBroken(Exception):
    """The session's shell is gone or answered something unexpected; use plain exec."""


class SessionLost(SessionBroken):
    """The shell died after the command started: collect it with `recover_script`, never rerun it."""

    def __init__(self, message: str, pid: int, files: str) -> None:
        super().__init__(message)
        self.pid = pid
        self.files = files  # <dir>/<id>: .o .e .rc


def recover_script(pid: int, files: str) -> str:
    """Wait for a lost command to end, then print "<rc> <base64 stdout> <base64 stderr>"."""
    f = shlex.quote(files)
    return (f"while kill -0 {int(pid)} 2>/dev/null; do sleep 0.05; done; "
            f"printf '%s %s %s' \"$(cat {f}.rc 2>/dev/null || echo 137)\" "
            f"\"$(base64 -w0 < {f}.o 2>/dev/null)\" \"$(base64 -w0 < {f}.e 2>/dev/null)\"; "
            f"rm -f {f}.o {f}.e {f}.rc")


def kill_tree_script(pid: int) -> str:
    """Pure-bash SIGKILL of `pid` and its descendants (no procps needed in the image)."""
    return (
        "kt() { local dir child key value; for dir in /proc/[0-9]*; do child=${dir#/proc/}; "
        "while read -r key value; do if [ \"$key\" = PPid: ]; then [ \"$value\" = \"$1\" ] && kt \"$child\"; "
        "break; fi; done 2>/dev/null < \"$dir/status\"; done; kill -9 \"$1\" 2>/dev/null; }; "
        f"kt {int(pid)}; true")


def build_script(command: str, cwd: str | None, env: dict[str, str] | None) -> str:
    """What `docker exec -w CWD -e K=V ... bash -c COMMAND` would run, recording its exit code.

    The command is eval'd in this shell (not a child) so that its `$$` is this shell: a
    command that kills "everything but itself" spares the shell that records its result."""
    lines = ['__rlkit_rc=$RLKIT_RC; unset RLKIT_RC; trap \'echo $? > "$__rlkit_rc"\' EXIT']
    if cwd:
        lines.append(f"cd {shlex.quote(cwd)} || exit 126")
    for key, value in (env or {}).items():
        lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(f"eval {shlex.quote(command)}")
    return "; ".join(lines)  # one line, so bash's "line N" in messages matches `bash -c`


class ExecSession:
    """One shell per container; `run` is blocking and must be called from a worker thread."""

    def __init__(self, api: Any, container_id: str) -> None:
        self._api = api
        self._container_id = container_id
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._sock: Any = None
        self._raw: Any = None
        self._buffer = b""
        self._pending = b""
        self._lines: list[str] = []
        self._dir = ""
        self.broken = False

    # ---- lifecycle ----------------------------------------------------------------------
    def _open(self) -> None:
        exec_id = self._api.exec_create(self._container_id, ["bash", "-c", _SERVER], stdin=True, stdout=True,
                                        stderr=False, user="root")["Id"]
        self._sock = self._api.exec_start(exec_id, socket=True)
        self._raw = getattr(self._sock, "_sock", self._sock)
        self._raw.setblocking(True)
        hello = self._read_line(time.monotonic() + 30)
        if not hello.startswith("H /"):
            raise SessionBroken(f"session did not start: {hello[:80]!r}")
        self._dir = hello[2:]

    def close(self) -> None:
        """Discard the session; wakes a thread blocked reading it (shutdown, then close)."""
        self.broken = True
        if self._raw is not None:
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
        """Take the session for one command; False when busy or broken (use plain exec)."""
        if self.broken:
            return False
        return self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()

    # ---- one command (caller holds the lock) -------------------------------------------------
    def run(self, script: str, deadline: float | None, on_start: Any = None) -> SessionResult:
        try:
            if self._sock is None:
                self._open()
            request_id = str(next(self._ids))
            payload = base64.b64encode(script.encode()).decode()
            self._raw.sendall(f"{request_id} {payload}\n".encode())
            started = self._read_line(deadline=None if deadline is None else max(deadline, time.monotonic() + 30))
            tag, rid, pid = (started.split(" ") + ["", "", ""])[:3]
            if tag != "S" or rid != request_id or not pid.isdigit():
                raise SessionBroken(f"unexpected session answer {started[:80]!r}")
            if on_start is not None:
                on_start(int(pid))
            try:
                done = self._read_line(deadline)
            except TimeoutError:
                self.broken = True  # the command still runs; its answer would desync the next one
                return SessionResult(b"", b"", None, int(pid))
            except (SessionBroken, OSError) as exc:
                self.close()
                raise SessionLost(str(exc), int(pid), f"{self._dir}/{request_id}") from exc
            parts = done.split(" ")
            if len(parts) != 5 or parts[0] != "R" or parts[1] != request_id:
                raise SessionBroken(f"unexpected session answer {done[:80]!r}")
            return SessionResult(base64.b64decode(parts[3]), base64.b64decode(parts[4]), int(parts[2]), int(pid))
        except SessionBroken:
            self.close()
            raise
        except (OSError, ValueError) as exc:
            self.close()
            raise SessionBroken(str(exc)) from exc

    def _read_line(self, deadline: float | None) -> str:
        while not self._lines:
            self._fill(deadline)
        return self._lines.pop(0)

    def _fill(self, deadline: float | None) -> None:
        """Read docker's multiplexed frames (8-byte header: stream, 0, 0, 0, size) into lines."""
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise TimeoutError
        ready, _, _ = select.select([self._raw], [], [], timeout)
        if not ready:
            raise TimeoutError
        chunk = self._raw.recv(65536)
        if not chunk:
            raise SessionBroken("session shell exited")
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
