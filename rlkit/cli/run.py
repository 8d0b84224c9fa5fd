"""`rlkit run CFG [--set KEY=VALUE ...]`: check the config (Run Validation + context checks), then start
the run in the background and return at once (`rlkit.run`).

Refuses (exit 1, nothing started) when a check is FATAL. Otherwise starts
`nohup setsid bash scripts/train/train.sh CFG` (its own session: closing the terminal or a
Ctrl-C does not reach it) with its output in OUTPUT_DIR/logs/train_<MMDD>.out, and prints the
PID, the log and how to follow the run.
"""

from __future__ import annotations

import argparse

from rlkit.cli._args import add_json_flag, add_set_flag, config_of, print_json


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit run", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (.env)")
    add_set_flag(parser)
    add_json_flag(parser)
    args = parser.parse_args(argv)

    from rlkit import api
    from rlkit.errors import PreflightFailed

    try:
        handle = api.run(config_of(args))
    except PreflightFailed as exc:
        if args.json:
            print_json(exc.report)
            return 1
        print(exc.report.render(block=False))
        print("\n✗ not started: fix the FATAL findings above (`rlkit check --context CFG` shows them again)")
        return 1
    if args.json:
        print_json(handle)
        return 0
    for warning in handle.warnings:
        print(f"  {warning}")
    print(f"✓ started {handle.project}/{handle.exp}: pid {handle.pid}\n  log:    {handle.log}\n"
          f"  follow: tail -f {handle.log}\n  status: rlkit status {args.config} [--follow]\n"
          f"  stop:   kill {handle.pid}   (then `rlkit cleanup {args.config}` if it was killed hard)")
    return 0
