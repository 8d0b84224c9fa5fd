"""Preflight: resolve a run config, then run every check (static, then world).

`run_preflight` returns a report of findings; it never prints or exits. `rlkit.check` returns it;
the CLI (`rlkit check`, `rlkit train` with PREFLIGHT_ONLY=1) renders it and picks the exit code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.config.display import clean
from rlkit.config.paths import machine_cache_dir
from rlkit.config.resolve import ResolvedConfig, render_block, resolve
from rlkit.errors import PreflightFailed
from rlkit.validate.findings import (
    CHECK_TIMEOUT_S,
    CHECKS,
    ORDER,
    Context,
    Finding,
    Phase,
    Status,
    run_bounded,
)

# Every check is bounded in time and output: a hung check becomes a FATAL, and a check with
# thousands of findings (80,000 unknown keys) shows the first few and a count.
CHECK_TIMEOUTS_S = {"tool_call_parser": 330.0}  # the probe subprocess has 300 s of its own
# Slow work a check waits on, started before any check runs so the others overlap it. A start
# that has not returned within EARLY_START_S (a hung model path) is left behind; its check reports.
EARLY_STARTS = {"tool_call_parser": "rlkit.validate.parser_probe:start_probe"}
EARLY_START_S = 5.0
MAX_FINDINGS_PER_CHECK = 10
# DRY_RUN prints vLLM's --max-model-len and the model path, so it reads the model as check does
# (its window, its files), besides every static check: DRY_RUN and check agree on both.
DRY_RUN_WORLD_CHECKS = ("model_dir", "context_length")
SEVERITY = {Status.SKIP: 0, Status.OK: 1, Status.WARN: 2, Status.FATAL: 3}


@dataclass
class PreflightReport:
    resolved: ResolvedConfig
    findings: list[Finding]

    @property
    def fatal(self) -> list[Finding]:
        return [f for f in self.findings if f.status is Status.FATAL]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.status is Status.WARN]

    @property
    def ok(self) -> bool:
        return not self.fatal

    def __repr__(self) -> str:
        """Counts and the config's path, never a value (`render()` and `as_dict()` show them, masked)."""
        counts = ", ".join(f"{k}: {v}" for k, v in self.counts().items())
        return clean(f"PreflightReport(ok={self.ok}, findings={{{counts}}}, config={str(self.resolved.config_path)!r})",
                     secrets=self.resolved)

    __str__ = __repr__

    def by_check(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.check == name]

    def counts(self) -> dict[str, int]:
        return {s.value: sum(f.status is s for f in self.findings) for s in Status}

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON data (`rlkit check --json`): ok, counts, every finding, every value and its layer."""
        findings = [{k: clean(v, secrets=self.resolved) if isinstance(v, str) else v for k, v in f.as_dict().items()}
                    for f in self.findings]
        return {"ok": self.ok, "counts": self.counts(), "findings": findings, **self.resolved.as_dict()}

    def raise_if_fatal(self) -> PreflightReport:
        """Raise `PreflightFailed` (key, file and fix of the first FATAL finding) unless the report is ok."""
        if self.ok:
            return self
        first = self.fatal[0]
        file, _, line = (first.where or "").rpartition(":")
        if not line.isdigit():
            file, line = first.where or "", ""
        more = f" (and {len(self.fatal) - 1} more FATAL finding(s))" if len(self.fatal) > 1 else ""
        raise PreflightFailed(self, message=clean(f"{first.check}: {first.message}{more}", secrets=self.resolved),
                              fix=clean(first.fix, secrets=self.resolved), key=first.key, file=file or None,
                              line=int(line) if line else None)

    def render(self, *, block: bool = True) -> str:
        parts = [render_block(self.resolved), ""] if block else []
        parts.append("Run Validation")
        parts += [f"  {f.render()}" for f in self.findings]
        counts = {s: sum(f.status is s for f in self.findings) for s in Status}
        parts.append(f"\n{counts[Status.OK]} ✓  {counts[Status.WARN]} ⚠  {counts[Status.FATAL]} ✗ FATAL"
                     + ("" if self.ok else "  — fix the FATAL findings above; nothing was launched"))
        return clean("\n".join(parts), secrets=self.resolved)


def run_checks(ctx: Context, phases: Iterable[Phase] = (Phase.STATIC, Phase.WORLD),
               only: Iterable[str] | None = None) -> list[Finding]:
    wanted = set(only) if only is not None else None
    phases = tuple(phases)
    for name, target in EARLY_STARTS.items():
        if CHECKS.get(name).phase in phases and (wanted is None or name in wanted):
            _start_early(target, ctx)
    findings: list[Finding] = []
    for phase in phases:
        for name in ORDER:
            check = CHECKS.get(name)
            if check.phase is not phase or (wanted is not None and name not in wanted):
                continue
            findings += _capped(name, run_bounded(check, ctx, CHECK_TIMEOUTS_S.get(name, CHECK_TIMEOUT_S)))
    return findings


def _start_early(target: str, ctx: Context) -> None:
    from rlkit.registry import import_string

    def start() -> None:
        try:
            import_string(target)(ctx)  # type: ignore[operator]
        except Exception:  # noqa: BLE001, S110 -- the check itself runs later and reports what is wrong
            pass

    thread = threading.Thread(target=start, name=f"start-{target}", daemon=True)
    thread.start()
    thread.join(EARLY_START_S)


def _capped(name: str, findings: list[Finding]) -> list[Finding]:
    if len(findings) <= MAX_FINDINGS_PER_CHECK:
        return findings
    shown, rest = findings[:MAX_FINDINGS_PER_CHECK - 1], findings[MAX_FINDINGS_PER_CHECK - 1:]
    worst = max(rest, key=lambda f: SEVERITY[f.status])
    first = rest[0]
    return [*shown, Finding(name, worst.status, f"{len(rest)} more finding(s) like these, first: {first.message}",
                            first.fix, key=first.key, where=first.where)]


def dry_run_checks() -> tuple[str, ...]:
    """The checks DRY_RUN runs before it prints the plan: the static ones and the model's."""
    return (*(n for n in ORDER if CHECKS.get(n).phase is Phase.STATIC), *DRY_RUN_WORLD_CHECKS)


def run_preflight(config: str | Path | ResolvedConfig, *, environ: Mapping[str, str] | None = None,
                  overrides: Mapping[str, object] | None = None, cache_dir: str | Path | None = None,
                  probe_runner: Callable[[list[str]], str] | None = None,
                  phases: Iterable[Phase] = (Phase.STATIC, Phase.WORLD),
                  only: Iterable[str] | None = None, context: bool = False) -> PreflightReport:
    """Resolve `config` through all layers (`overrides` on top; an already resolved config is used
    as it is) and run Run Validation on it. `context` adds what a shared machine needs before a
    launch: this run in flight (its lock, stray processes, a live Ray head) and the GPUs' owners."""
    resolved = config if isinstance(config, ResolvedConfig) else resolve(config, environ, overrides=overrides)
    cache = Path(cache_dir) if cache_dir is not None else resolved.path("RLKIT_CACHE_DIR")
    ctx = Context(resolved=resolved, cache_dir=cache or machine_cache_dir(), probe_runner=probe_runner)
    findings = run_checks(ctx, phases, only)
    if context:
        from rlkit.validate.context import run_context_checks

        findings += run_context_checks(ctx)
    return PreflightReport(resolved, findings)
