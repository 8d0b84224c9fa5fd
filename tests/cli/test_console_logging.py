"""The `rlkit` command's console: warnings and errors only, without the libraries' noise, even after
verl's import configures the root logger."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_library_debug_and_benign_errors_stay_off_the_console() -> None:
    script = textwrap.dedent("""
        import logging
        from rlkit.cli.main import _console_logging
        _console_logging()
        import verl  # noqa: F401  (its import calls logging.basicConfig)
        harbor = logging.getLogger("harbor.trial")
        harbor.setLevel(logging.DEBUG)  # as harbor's own loggers are
        harbor.debug("Trajectory dumped to /x")
        harbor.error("Agent 'terminus-2' exposes no native web search or fetch tools for Harbor to disable")
        logging.getLogger("LiteLLM").warning("register_model: model=policy has custom pricing")
        harbor.error("the sandbox could not start")
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip() and "Warning" not in x and "warn(" not in x]
    assert lines == ["ERROR harbor.trial: the sandbox could not start"], done.stderr
