"""`rlkit train CFG`: what scripts/train/train.sh runs.

  PREFLIGHT_ONLY=1  resolve, print the run configuration block and Run Validation; launch nothing.
  DRY_RUN=1         print the fully expanded launch commands (after the static checks); launch nothing.
  neither           preflight, then run. The training loop is not part of rlkit yet: exits 3.

Exit codes: 0 fine, 1 a FATAL finding, 2 the config could not be read, 3 training unavailable.
"""

from __future__ import annotations

import sys

from rlkit.cli.check import parse

EXIT_FATAL = 1
EXIT_NO_TRAINER = 3


def main(argv: list[str]) -> int:
    args = parse(argv, prog="rlkit train")
    # Resolve once to read the process switches (they are config keys of the process layer).
    from rlkit.config.resolve import resolve
    from rlkit.validate.findings import Phase
    from rlkit.validate.preflight import run_preflight

    switches = resolve(args.config).config
    if switches.DRY_RUN and not switches.PREFLIGHT_ONLY:
        report = run_preflight(args.config, phases=(Phase.STATIC,))
        if not report.ok:
            print(report.render(block=False))
            return EXIT_FATAL
        from rlkit.launch.plan import build_plan

        print(build_plan(report.resolved).render())
        return 0
    report = run_preflight(args.config)
    print(report.render(block=not args.quiet))
    if not report.ok:
        return EXIT_FATAL
    if switches.DRY_RUN:
        from rlkit.launch.plan import build_plan

        print()
        print(build_plan(report.resolved).render())
    if switches.PREFLIGHT_ONLY or switches.DRY_RUN:
        return 0
    print("\nPreflight passed. The training loop is not available in this version of rlkit yet; nothing was "
          "launched. Use PREFLIGHT_ONLY=1 or DRY_RUN=1.", file=sys.stderr)
    return EXIT_NO_TRAINER
