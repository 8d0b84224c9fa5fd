"""`rlkit train CFG`: what scripts/train/train.sh runs.

  PREFLIGHT_ONLY=1  resolve, print the run configuration block and Run Validation; launch nothing.
  DRY_RUN=1         print the fully expanded launch commands (after the static checks) and write the
                    files they name (the agent-loop YAML); launch nothing.
  neither           preflight, then run the trainer TRAINER names:
                      local  the embedded trainer on this machine (rlkit.train.local)
                      verl   the cluster path (verl main_ppo on Ray)

Exit codes: 0 fine, 1 a FATAL finding or a failed run, 2 the config could not be read,
3 the chosen trainer is not available, 130 interrupted.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rlkit.cli.check import parse

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig

EXIT_FATAL = 1
EXIT_NO_TRAINER = 3
EXIT_INTERRUPTED = 130

# TRAINER value -> "module:function(resolved) -> exit code". The verl path registers here.
RUNNERS: dict[str, str] = {
    "local": "rlkit.train.local:train_local",
    "verl": "rlkit.train.verl_run:train_verl",
}


def _dry_run_text(resolved: ResolvedConfig) -> str:
    """What the chosen trainer will run. verl: the launch plan, with its files written (the
    agent-loop YAML the trainer line names), so the printed commands can be pasted as they are.
    local: the embedded trainer's vLLM, proxy and Ray. Nothing is launched."""
    if resolved.config.TRAINER.value == "local":
        from rlkit.train.local import dry_run_text

        return dry_run_text(resolved)
    from rlkit.launch.cluster import write_files
    from rlkit.launch.plan import build_plan

    plan = build_plan(resolved)
    write_files(plan)
    return plan.render()


def run_trainer(resolved: ResolvedConfig) -> int:
    from rlkit.errors import RlkitError, UserError
    from rlkit.registry import import_string

    name = resolved.config.TRAINER.value
    target = RUNNERS.get(name)
    if target is None:
        print(f"\nPreflight passed. TRAINER={name} is not available in this version of rlkit yet; nothing was "
              "launched. Use TRAINER=local for the embedded trainer, or PREFLIGHT_ONLY=1 / DRY_RUN=1.",
              file=sys.stderr)
        return EXIT_NO_TRAINER
    try:
        return int(import_string(target)(resolved))  # type: ignore[operator]
    except KeyboardInterrupt:
        print("\ninterrupted: sandboxes, Ray and vLLM were stopped; the same command resumes from the last "
              "checkpoint", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UserError:
        raise  # rlkit.cli.main renders it with its fix
    except RlkitError as exc:
        print(f"\n✗ FATAL {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FATAL


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
        print(_dry_run_text(report.resolved))
        return 0
    report = run_preflight(args.config)
    print(report.render(block=not args.quiet))
    if not report.ok:
        return EXIT_FATAL
    if switches.DRY_RUN:
        print()
        print(_dry_run_text(report.resolved))
    if switches.PREFLIGHT_ONLY or switches.DRY_RUN:
        return 0
    print(flush=True)
    return run_trainer(report.resolved)
