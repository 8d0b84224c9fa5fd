"""`rlkit check CFG [--context] [--set KEY=VALUE ...]`: preflight a run config (Run Validation). Launches nothing.

--context adds what `/rl:check` needs on a shared machine: is this run already in flight (its
lock, stray rlkit processes, a live Ray head) and who holds the GPUs it wants (NVML).
Exit codes: 0 no FATAL finding, 1 at least one FATAL, 2 the config could not be read.
"""

from __future__ import annotations

import argparse

from rlkit.cli._args import add_json_flag, add_set_flag, config_of, print_json


def parse(argv: list[str], prog: str = "rlkit check") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (.env), e.g. scripts/train/configs/my_run.env")
    parser.add_argument("--quiet", action="store_true", help="omit the run configuration block")
    parser.add_argument("--context", action="store_true",
                        help="also: run in flight (lock, processes, Ray head) and GPU ownership (NVML)")
    add_set_flag(parser)
    add_json_flag(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    from rlkit import api

    args = parse(argv)
    report = api.check(config_of(args), context=args.context)
    if args.json:
        print_json(report)
    else:
        print(report.render(block=not args.quiet))
    return 0 if report.ok else 1
