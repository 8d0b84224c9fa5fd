"""`rlkit` command line: parses the command name and hands off.

Each command group lives in its own module under rlkit/cli and exposes
`main(argv: list[str]) -> int`. Modules are imported only when their command runs,
so `rlkit check` never pays for another command's imports.
"""

from __future__ import annotations

import contextlib
import logging
import sys

# Commands that start sandboxes outside a trainer (whose graceful stop has its own handlers): SIGTERM/SIGHUP stop
# them as Ctrl-C does, so their trials remove their sandboxes (rlkit.rollout.interrupt).
RUNS_TRIALS = frozenset({"trial", "rollout", "eval", "sft"})

# command -> (module, one-line help). Sub-commands ("index build") are parsed by the module.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("rlkit.cli.check", "preflight a run config (Run Validation); launches nothing"),
    "train": ("rlkit.cli.train", "run a config: PREFLIGHT_ONLY=1 / DRY_RUN=1 / full run"),
    "index": ("rlkit.cli.index", "task indexes: `rlkit index build TASKS_DIR -o FILE.parquet`"),
    "images": ("rlkit.cli.images", "sandbox images: `rlkit images base|build`"),
    "tasks": ("rlkit.cli.tasks", "task-set health: `rlkit tasks check TASKS_DIR|INDEX` (oracle 1, no-op 0)"),
    "trial": ("rlkit.cli.trial", "run one trial of a task with an agent"),
    "rollout": ("rlkit.cli.rollout", "k attempts per task: pass rates and a difficulty-filtered index"),
    "eval": ("rlkit.cli.eval", "pass@1 / pass@k of a model on a task index"),
    "cleanup": ("rlkit.cli.cleanup", "remove your orphaned sandboxes, vLLM/proxy/Ray processes and /tmp leftovers"),
    "proxy": ("rlkit.cli.proxy", "serve the token-recording proxy in front of vLLM"),
    "model": ("rlkit.cli.model", "embedded default model: `rlkit model tiny OUT_DIR`"),
    "status": ("rlkit.cli.status", "a run's state, step k/N, ETA and the first-step numbers (files only; --follow)"),
    "dashboard": ("rlkit.cli.dashboard", "serve the monitoring dashboard (curves, trajectory browser) on DASHBOARD_PORT"),
    "run": ("rlkit.cli.run", "check a config, then start train.sh in the background (nohup setsid) and return"),
    "ckpt": ("rlkit.cli.ckpt", "checkpoints: `rlkit ckpt merge PATH` (verl's merger), `rlkit ckpt prune ROOT`"),
    "sft": ("rlkit.cli.sft", "warm start: fine-tune the policy on teacher trajectories (cached)"),
}


class _LibraryNoise(logging.Filter):
    """harbor logs at DEBUG and says at ERROR, on every terminus trial, that it has no web tools to
    disable; LiteLLM warns that the policy has no price. Neither tells a user anything."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("harbor"):
            return "exposes no native web search" not in record.getMessage()
        return not record.name.startswith("LiteLLM") or record.levelno >= logging.ERROR


def _console_logging() -> None:
    """Warnings and errors on stderr. Set before any library is imported: verl's import calls
    `logging.basicConfig()` with no level on its handler, which would print harbor's DEBUG records."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_LibraryNoise())
    logging.basicConfig(handlers=[handler], level=logging.WARNING)
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)  # it has its own stderr handler too


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: rlkit COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rlkit.config.display import flush, install

    install()  # every message this command prints or logs passes rlkit.config.display.clean
    try:
        return _main(argv)
    finally:
        flush()


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0 if argv else 2
    if argv[0] in {"-V", "--version"}:
        from rlkit import __version__

        print(f"rlkit {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"rlkit: unknown command {name!r}{hint}\n\n{_usage()}", file=sys.stderr)
        return 2
    import importlib

    from rlkit.errors import UserError

    if name != "proxy":  # `rlkit proxy serve` logs its own INFO lines
        _console_logging()
    from rlkit.config.display import clean_log_handlers

    clean_log_handlers()

    module = importlib.import_module(COMMANDS[name][0])
    if name in RUNS_TRIALS:
        from rlkit.rollout.interrupt import signals_interrupt

        stop_as_ctrl_c = signals_interrupt()
    else:
        stop_as_ctrl_c = contextlib.nullcontext()
    try:
        with stop_as_ctrl_c:
            return int(module.main(rest) or 0)
    except UserError as exc:
        print(f"✗ FATAL {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
