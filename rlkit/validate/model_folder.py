"""The checks `rlkit check` runs on MODEL_PATH, for commands that take a model folder without a run config
(`rlkit eval MODEL_DIR`, `rlkit rollout --model-path M`).

The same functions with the same budgets: `model_dir` (config.json, tokenizer files and chat template,
read through rlkit.config.files and rlkit.config.model_files: regular files inside the model folder,
bounded in size and nesting) and `tool_call_parser` (the chat template rendered in the probe
subprocess within TEMPLATE_BUDGET_S, the whole probe killed past PROBE_TIMEOUT_S). A FATAL finding
is a UserError naming the folder, raised before vLLM or the proxy starts.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlkit.config.paths import machine_cache_dir
from rlkit.errors import UserError
from rlkit.validate.findings import Context, Finding, Status
from rlkit.validate.model import model_dir
from rlkit.validate.parser_probe import tool_call_parser


class _ModelOnly:
    """The part of a ResolvedConfig that model_dir and tool_call_parser read: MODEL_PATH and TOOL_CALL_PARSER."""

    bad_keys: frozenset[str] = frozenset()

    def __init__(self, path: Path, parser: str) -> None:
        self._path = path
        self.config = SimpleNamespace(TOOL_CALL_PARSER=SimpleNamespace(value=parser))

    def path(self, key: str) -> Path | None:
        return self._path if key == "MODEL_PATH" else None

    def where(self, key: str) -> str:
        return "the model folder" if key == "MODEL_PATH" else "the tool-call parser setting"


def check_model_folder(path: str | Path, parser: str, *, cache_dir: Path | None = None,
                       probe_runner: Any = None) -> list[Finding]:
    """model_dir's findings, then the parser probe's (only when the folder itself passed)."""
    ctx = Context(resolved=_ModelOnly(Path(path).expanduser().absolute(), parser),  # type: ignore[arg-type]
                  cache_dir=cache_dir or machine_cache_dir(), probe_runner=probe_runner)
    findings = model_dir(ctx)
    if not any(f.status is Status.FATAL for f in findings):
        findings += tool_call_parser(ctx)
    return findings


def require_model_folder(path: str | Path, parser: str, *, cache_dir: Path | None = None,
                         probe_runner: Any = None) -> list[Finding]:
    """check_model_folder, raising UserError on the first FATAL finding; answers the findings otherwise."""
    findings = check_model_folder(path, parser, cache_dir=cache_dir, probe_runner=probe_runner)
    fatal = next((f for f in findings if f.status is Status.FATAL), None)
    if fatal is not None:
        raise UserError(f"model folder {fatal.message}" if not fatal.message.startswith("MODEL_PATH") else
                        fatal.message.replace("MODEL_PATH", "model folder", 1), fix=fatal.fix, key=fatal.key,
                        file=str(path))
    return findings
