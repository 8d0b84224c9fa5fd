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
            assert (await env.exec("id -un", user="root")).stdout == "root\n"
            assert env._session is session and not session.broken
        finally:
            await env.stop(delete=True)

    asyncio.run(scenario())


def test_session_timeout_kills_the_command_and_starts_a_new_session(calc_task: Path, tmp_path: Path) -> None:
    env = make_env(calc_task, tmp_path)

    async def scenario() -> str:
        await env.start(force_build=False)
        try:
            await env.exec("true")
            first = env._session
            with pytest.raises(SandboxExecTimeout):
                await env.exec("sleep 300 & sleep 301; echo never", timeout_sec=1)
            assert first.broken
            after = await env.exec("echo fine")
            assert after.stdout == "fine\n" and env._session is not first
            return (await env.exec("ps -eo args")).stdout
        finally:
            await env.stop(delete=True)

    assert "sleep 30" not in asyncio.run(scenario())


def test_session_survives_its_shell_being_killed(calc_task: Path, tmp_path: Path) -> None:
    import subprocess

    env = make_env(calc_task, tmp_path)

    async def scenario() -> None:
        await env.start(force_build=False)
        try:
            await env.exec("true")
            first = env._session
            # Kill the session's shell from outside (its script holds the mktemp template).
            await asyncio.to_thread(subprocess.run, ["docker", "exec", env.container_id, "pkill", "-9", "-f",
                                                     "rlkit-exec.XXXXXX"], check=True, capture_output=True)
            results = [await env.exec("echo again") for _ in range(3)]
            assert [r.stdout for r in results] == ["again\n"] * 3
            assert first.broken and env._session is not first and not env._session.broken
        finally:
            await env.stop(delete=True)

    asyncio.run(scenario())


def test_command_that_kills_every_other_process_runs_once(calc_task: Path, tmp_path: Path) -> None:
    """A command that kills everything but itself (a verifier's clean slate) also kills the
    session's shell; its result is still collected and it is not run a second time."""
    env = make_env(calc_task, tmp_path)
    kill_all_but_me = ("echo run >> /tmp/runs; for p in /proc/[0-9]*; do p=${p#/proc/}; "
                       "case $p in 1|$$) continue;; esac; read -r comm < /proc/$p/comm; "
                       "[ \"$comm\" = sleep ] || kill -9 $p 2>/dev/null; done; echo done; exit 4")

    async def scenario() -> tuple:
        await env.start(force_build=False)
        try:
            await env.exec("true")
            result = await env.exec(kill_all_but_me)
            runs = (await env.exec("cat /tmp/runs")).stdout
            return result.return_code, result.stdout, runs
        finally:
            await env.stop(delete=True)

    assert asyncio.run(scenario()) == (4, "done\n", "run\n")


def test_build_script_quotes_everything() -> None:
    script = build_script("echo $A", "/my dir", {"A": "x'y"})
    assert script.split("; ")[-3:] == ["cd '/my dir' || exit 126", "export A='x'\"'\"'y'", "eval 'echo $A'"]
    assert "trap" in script and "\n" not in script
