"""`rlkit train CFG [--set KEY=VALUE ...]`: what scripts/train/train.sh runs (`rlkit.train`).

  PREFLIGHT_ONLY=1  resolve, print the run configuration block and Run Validation; launch nothing.
  DRY_RUN=1         print the fully expanded launch commands (after the static checks and the model's:
                    its files and window, which set --max-model-len) and write the files they name (the
                    agent-loop YAML); launch nothing.
  neither           preflight, then run the trainer TRAINER names:
                      local  the embedded trainer on this machine (rlkit.train.local)
                      verl   the cluster path (verl main_ppo on Ray)

Exit codes: 0 fine, 1 a FATAL finding or a failed run, 2 the config could not be read,
3 the chosen trainer is not available, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys

from rlkit.cli._args import config_of, print_json
from rlkit.cli.check import parse

EXIT_FATAL = 1
EXIT_NO_TRAINER = 3
EXIT_INTERRUPTED = 130


def _plan_only(report) -> bool:
    """DRY_RUN without PREFLIGHT_ONLY: only the static checks ran, and only the plan is printed."""
    c = report.resolved.config
    return bool(c.DRY_RUN and not c.PREFLIGHT_ONLY)


def _interrupted(args) -> str:
    """After a hard interrupt: what the same command resumes from."""
    from rlkit import api
    from rlkit.train.stop import interrupted_message

    try:
        return interrupted_message(api.resolve(config_of(args)).run_paths().checkpoints)
    except Exception:  # noqa: BLE001 -- the message is a courtesy; the interrupt stands
        return "interrupted: sandboxes, Ray and vLLM were stopped"


def main(argv: list[str]) -> int:
    args = parse(argv, prog="rlkit train")
    from rlkit import api
    from rlkit.errors import PreflightFailed, RlkitError, TrainerFailed, TrainerUnavailable, UserError
    from rlkit.train.stop import RunStopped

    def shown(report) -> None:  # before anything starts
        if args.json:
            return
        if not _plan_only(report):
            print(report.render(block=not args.quiet))
        if not (report.resolved.config.DRY_RUN or report.resolved.config.PREFLIGHT_ONLY):
            print(flush=True)

    console = None
    if args.json:  # stdout carries the one JSON object; the trainer's progress goes to stderr
        from rich.console import Console

        console = Console(stderr=True)
    try:
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            result = api.train(config_of(args), console=console, on_preflight=shown)
    except PreflightFailed as exc:
        if args.json:
            print_json(exc.report)
        else:
            print(exc.report.render(block=not args.quiet and not _plan_only(exc.report)))
        return EXIT_FATAL
    except TrainerUnavailable as exc:
        print(f"\nPreflight passed. {exc.message}. Use TRAINER=local for the embedded trainer, or "
              "PREFLIGHT_ONLY=1 / DRY_RUN=1.", file=sys.stderr)
        return EXIT_NO_TRAINER
    except TrainerFailed as exc:
        return exc.returncode  # the trainer's own output says why
    except RunStopped as exc:  # a stop that saved: it says what
        print(f"\n{exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"\n{_interrupted(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UserError:
        raise  # rlkit.cli.main renders it with its fix
    except RlkitError as exc:
        print(f"\n✗ FATAL {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FATAL
    if args.json:
        print_json(result)
    elif result.dry_run is not None:
        if not _plan_only(result.report):
            print()
        print(result.dry_run)
    return 0
