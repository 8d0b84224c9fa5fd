"""`rlkit run CFG`: check the config (Run Validation + context checks), then start the run in the
background and return at once.

Refuses (exit 1, nothing started) when a check is FATAL. Otherwise starts
`nohup setsid bash scripts/train/train.sh CFG` (its own session: closing the terminal or a
Ctrl-C does not reach it) with its output in OUTPUT_DIR/logs/train_<MMDD>.out, and prints the
PID, the log and how to follow the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def launch_command(config: Path) -> list[str]:
    train_sh = REPO_ROOT / "scripts" / "train" / "train.sh"
    inner = ["bash", str(train_sh), str(config)] if train_sh.is_file() else [sys.executable, "-m", "rlkit", "train",
                                                                              str(config)]
    return [shutil.which("nohup") or "nohup", shutil.which("setsid") or "setsid", *inner]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit run", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (.env)")
    args = parser.parse_args(argv)

    from rlkit.cli.check import preflight

    report = preflight(args.config, context=True)
    if not report.ok:
        print(report.render(block=False))
        print("\n✗ not started: fix the FATAL findings above (`rlkit check --context CFG` shows them again)")
        return 1
    for finding in report.warnings:
        print(f"  {finding.render()}")
    resolved = report.resolved
    from rlkit.config.paths import RunPaths

    c = resolved.config
    logs = RunPaths(resolved.path("OUTPUT_DIR") or resolved.root, c.PROJECT_NAME, c.EXP_NAME).logs
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"train_{dt.datetime.now():%m%d}.out"
    config = Path(args.config).resolve()
    with log.open("ab") as out:
        proc = subprocess.Popen(launch_command(config), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=Path.cwd(), close_fds=True)
    print(f"✓ started {c.PROJECT_NAME}/{c.EXP_NAME}: pid {proc.pid}\n  log:    {log}\n"
          f"  follow: tail -f {log}\n  status: rlkit status {args.config} [--follow]\n"
          f"  stop:   kill {proc.pid}   (then `rlkit cleanup {args.config}` if it was killed hard)")
    return 0
