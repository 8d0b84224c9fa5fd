"""A run started in the background: `nohup setsid bash scripts/train/train.sh CFG [--set K=V ...]`.

The run gets its own session (closing the terminal or a Ctrl-C does not reach it) and writes its
output to OUTPUT_DIR/logs/train_<MMDD>.out. `start_background` returns at once with a `RunHandle`:
the pid, the log, the run lock the trainer takes (logs/<exp>.lock), and ways to wait for or stop it.
Overrides travel to the child as `--set KEY=VALUE` (secret keys in its environment instead, never on a
command line), so it resolves the same values.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.config.owner import read_lock
from rlkit.config.paths import RunPaths

REPO_ROOT = Path(__file__).resolve().parents[2]


def launch_command(config: Path, overrides: dict[str, str] | None = None) -> list[str]:
    train_sh = REPO_ROOT / "scripts" / "train" / "train.sh"
    sets = [arg for key, value in (overrides or {}).items() for arg in ("--set", f"{key}={value}")]
    inner = (["bash", str(train_sh), str(config)] if train_sh.is_file()
             else [sys.executable, "-m", "rlkit", "train", str(config)])
    return [shutil.which("nohup") or "nohup", shutil.which("setsid") or "setsid", *inner, *sets]


@dataclass
class RunHandle:
    """A run started by `rlkit.run`: its process, its log and its lock."""

    project: str
    exp: str
    pid: int
    log: Path
    lock: Path
    config: Path
    command: list[str]
    overrides: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the ⚠ findings of the checks before the start
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"project": self.project, "exp": self.exp, "pid": self.pid, "log": str(self.log),
                "lock": str(self.lock), "config": str(self.config), "command": self.command,
                "overrides": self.overrides, "warnings": self.warnings}

    def alive(self) -> bool:
        """The started process is still running (its trainer may have finished its work already)."""
        if self.process is not None:
            return self.process.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the run ends (None when `timeout` seconds pass first)."""
        if self.process is None:
            raise RuntimeError("wait() needs the handle rlkit.run returned (this one was not started here)")
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the run's whole session (the trainer tears down sandboxes, Ray and vLLM on SIGTERM)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def lock_info(self) -> dict[str, Any] | None:
        """The run lock's JSON (pid, step, phase, heartbeat) once the trainer holds it, else None."""
        return read_lock(self.lock)


def start_background(config: Path, paths: RunPaths, overrides: dict[str, str] | None = None,
                     cwd: Path | None = None, secrets: dict[str, str] | None = None) -> RunHandle:
    """Start the run detached and return at once. `secrets` (process-layer keys) go into its environment."""
    paths.logs.mkdir(parents=True, exist_ok=True)
    log = paths.logs / f"train_{dt.datetime.now():%m%d}.out"
    config = config.resolve()
    command = launch_command(config, overrides)
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd or Path.cwd(), close_fds=True, env={**os.environ, **(secrets or {})})
    return RunHandle(paths.project, paths.exp, proc.pid, log, paths.lock, config, command, dict(overrides or {}),
                     process=proc)
