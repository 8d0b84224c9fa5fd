"""`rlkit status [CFG|EXP]` (also /rl:status): is the run alive, step k/N, step time, ETA, the first-step numbers.

A run whose pass rate falls while entropy rises or one outcome takes over is named (`collapse ✗`, with its
numbers and what to try; rlkit.monitor.collapse).

Reads files only (logs/, harbor_trials/, the run lock) and the process table: it works on a
live, finished or crashed run, whichever trainer wrote it. Exit codes: 0 shown, 2 no such run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlkit.cli._args import add_set_flag


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlkit status", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="run config (.env) or experiment name (default: the latest run "
                                                  "under ./logs)")
    parser.add_argument("--root", type=Path, help="folder holding logs/ and harbor_trials/ (with an experiment name)")
    parser.add_argument("--follow", "-f", action="store_true", help="refresh until the run stops (Ctrl-C to leave)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between refreshes with --follow")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    add_set_flag(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        return _loop(args)
    except BrokenPipeError:  # `rlkit status | head`: the reader left
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _loop(args: argparse.Namespace) -> int:
    from rlkit import api
    from rlkit.cli._args import config_of
    from rlkit.monitor.status import render

    target = config_of(args, "target")
    while True:
        status = api.status(target, root=args.root)
        if args.json:
            print(json.dumps(status.as_dict(), allow_nan=False), flush=True)  # strict JSON: as_dict has no NaN
        else:
            if args.follow:
                print(f"\n── {time.strftime('%H:%M:%S')}", flush=True)
            print(render(status), flush=True)
        if not args.follow or not status.live.alive:
            return 0
        time.sleep(max(args.interval, 0.5))
