"""`rlkit check CFG [--context]`: preflight a run config (Run Validation). Launches nothing.

--context adds what `/rl:check` needs on a shared machine: is this run already in flight (its
lock, stray rlkit processes, a live Ray head) and who holds the GPUs it wants (NVML).
Exit codes: 0 no FATAL finding, 1 at least one FATAL, 2 the config could not be read.
"""

from __future__ import annotations

import argparse


def parse(argv: list[str], prog: str = "rlkit check") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (.env), e.g. scripts/train/configs/my_run.env")
    parser.add_argument("--quiet", action="store_true", help="omit the run configuration block")
    parser.add_argument("--context", action="store_true",
                        help="also: run in flight (lock, processes, Ray head) and GPU ownership (NVML)")
    return parser.parse_args(argv)


def preflight(config: str, context: bool):
    from rlkit.validate.preflight import run_preflight

    report = run_preflight(config)
    if context:
        from pathlib import Path

        from rlkit.validate.context import run_context_checks
        from rlkit.validate.findings import Context

        ctx = Context(resolved=report.resolved, cache_dir=report.resolved.path("RLKIT_CACHE_DIR") or Path.home())
        report.findings += run_context_checks(ctx)
    return report


def main(argv: list[str]) -> int:
    args = parse(argv)
    report = preflight(args.config, args.context)
    print(report.render(block=not args.quiet))
    return 0 if report.ok else 1
