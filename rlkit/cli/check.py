"""`rlkit check CFG`: preflight a run config (Run Validation). Launches nothing.

Exit codes: 0 no FATAL finding, 1 at least one FATAL, 2 the config could not be read.
"""

from __future__ import annotations

import argparse


def parse(argv: list[str], prog: str = "rlkit check") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (.env), e.g. scripts/train/configs/my_run.env")
    parser.add_argument("--quiet", action="store_true", help="omit the run configuration block")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    from rlkit.validate.preflight import run_preflight

    report = run_preflight(args.config)
    print(report.render(block=not args.quiet))
    return 0 if report.ok else 1
