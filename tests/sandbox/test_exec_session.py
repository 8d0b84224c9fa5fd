"""The docker backend's long-lived exec shell: same results as `docker exec`, with fallbacks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rlkit.sandbox._exec_session import build_script
from rlkit.sandbox.timeouts import SandboxExecTimeout
from tests.sandbox._helpers import make_env

pytestmark = pytest.mark.docker

COMMANDS = [
    ("echo out; echo err >&2; exit 3", None, None),
    ("pwd; echo \"$X\"", "/tmp", {"X": "it's \"quoted\" $HOME"}),
    ("printf 'caf\\xc3\\xa9\\n'; head -c 3000000 /dev/zero | tr '\\0' a | wc -c", None, None),
    ("cat /nonexistent", "/", None),
    ("true", None, None),
    # Bytes the request line escapes: tabs, backslashes (\\c would stop printf %b), %, runs
    # of spaces, trailing spaces, non-ASCII, several lines.
    ("printf '%s|' 'a\tb' 'c\\cd' '50%' \"x  y\" ' é → ü '\necho \"two\\\\lines\"   ", None, None),
    ("cd /missing-dir", None, None),
]


def test_session_matches_docker_exec(calc_task: Path, tmp_path: Path) -> None:
    fast = make_env(calc_task, tmp_path)
    plain = make_env(calc_task, tmp_path, exec_session=False)

    async def results(env) -> list[tuple]:
        await env.start(force_build=False)
        try:
            out = []
            for command, cwd, env_vars in COMMANDS:
                r = await env.exec(command, cwd=cwd, env=env_vars)
                out.append((r.return_code, r.stdout, r.stderr))
            big = await env.exec("head -c 1000000 /dev/urandom | base64 -w0")
            out.append((big.return_code, len(big.stdout), big.stderr))
            return out
        finally:
            await env.stop(delete=True)

    via_session = asyncio.run(results(fast))
    assert fast._session is None  # closed on stop
    assert via_session == asyncio.run(results(plain))
    assert via_session[0] == (3, "out\n", "err\n")
    assert via_session[1][1] == "/tmp\nit's \"quoted\" $HOME\n"
    assert via_session[2][1] == "café\n3000000\n"


def test_session_is_reused_and_falls_back_when_busy_or_not_root(calc_task: Path, tmp_path: Path) -> None:
    env = make_env(calc_task, tmp_path)

    async def scenario() -> None:
        await env.start(force_build=False)
        try:
            await env.exec("true")
            session = env._session
            assert session is not None and not session.broken
            # Two at once: one runs in the session, the other through docker exec.
            slow, quick = await asyncio.gather(env.exec("sleep 0.5; echo slow"), env.exec("echo quick"))
            assert (slow.stdout, quick.stdout) == ("slow\n", "quick\n")
            assert (await env.exec("id -un", user="nobody")).stdout == "nobody\n"
            # A background writer left by one command never leaks into the next one's output.
            await env.exec("(while true; do echo noise; sleep 0.05; done) & true")
            await asyncio.sleep(0.2)
            assert (await env.exec("sleep 0.2; echo clean")).stdout == "clean\n"
            assert (await env.exec("id -un", user="root")).stdout == "root\n"
            assert env._session is session and not session.broken
        finally:
            await env.stop(delete=True)

    asyncio.run(scenario())


def test_session_timeout_and_cancel_kill_the_command_and_keep_the_session(calc_task: Path, tmp_path: Path) -> None:
    env = make_env(calc_task, tmp_path)

    async def scenario() -> str:
        await env.start(force_build=False)
        try:
            session = env._session
            with pytest.raises(SandboxExecTimeout):
                await env.exec("sleep 300 & sleep 301; echo never", timeout_sec=1)
            assert (await env.exec("echo after-timeout")).stdout == "after-timeout\n"
            task = asyncio.create_task(env.exec("sleep 302; echo never"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await env.exec("echo after-cancel")).stdout == "after-cancel\n"
            assert env._session is session and not session.broken
            return (await env.exec("ps -eo args")).stdout
        finally:
            await env.stop(delete=True)

    assert "sleep 30" not in asyncio.run(scenario())


def test_killing_every_leftover_process_spares_the_session(calc_task: Path, tmp_path: Path) -> None:
    """A verifier's clean slate kills all but init, itself and the keep-alive (the first
    child of init): the session is that keep-alive, so it keeps serving."""
    env = make_env(calc_task, tmp_path)
    kill_leftovers = (
        "echo run >> /tmp/runs; keep=''; for d in /proc/[0-9]*; do p=${d#/proc/}; [ $p = 1 ] && continue; "
        "while read -r k v; do if [ $k = PPid: ]; then if [ $v = 1 ] && { [ -z \"$keep\" ] || [ $p -lt $keep ]; }; "
        "then keep=$p; fi; break; fi; done < $d/status; done; "
        "for d in /proc/[0-9]*; do p=${d#/proc/}; case $p in 1|$$|$keep) continue;; esac; kill -9 $p 2>/dev/null; "
        "done; echo done; exit 4")

    async def scenario() -> tuple:
        await env.start(force_build=False)
        try:
            await env.exec("sleep 600 &>/dev/null & disown; true")  # a leftover to kill
            result = await env.exec(kill_leftovers)
            # SIGKILL is asynchronous: on a loaded machine the sleep may not have run its exit yet
            # when the next command lists processes, so wait (at most 5 s) for it to be gone.
            after = await env.exec("cat /tmp/runs; for i in $(seq 50); do n=$(ps -eo args | grep -c '[s]leep 600'); "
                                   "[ \"$n\" = 0 ] && break; sleep 0.1; done; echo $n")
            return result.return_code, result.stdout, after.stdout, env._session.broken
        finally:
            await env.stop(delete=True)

    assert asyncio.run(scenario()) == (4, "done\n", "run\n0\n", False)


def test_build_script_quotes_everything() -> None:
    script = build_script("echo $A", "/my dir", {"A": "x'y"})
    assert script.split("; ") == ["cd '/my dir' || exit 126", "export A='x'\"'\"'y'", "exec bash -c 'echo $A'"]
