"""Preflight: resolve a run config, then run every check (static, then world).

`run_preflight` returns a report of findings; it never prints or exits. The CLI
(`rlkit check`, `rlkit train` with PREFLIGHT_ONLY=1) renders it and picks the exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rlkit.config.resolve import ResolvedConfig, render_block, resolve
from rlkit.validate.findings import CHECKS, ORDER, Context, Finding, Phase, Status


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

    def by_check(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.check == name]

    def render(self, *, block: bool = True) -> str:
        parts = [render_block(self.resolved), ""] if block else []
        parts.append("Run Validation")
        parts += [f"  {f.render()}" for f in self.findings]
        counts = {s: sum(f.status is s for f in self.findings) for s in Status}
        parts.append(f"\n{counts[Status.OK]} ✓  {counts[Status.WARN]} ⚠  {counts[Status.FATAL]} ✗ FATAL"
                     + ("" if self.ok else "  — fix the FATAL findings above; nothing was launched"))
        return "\n".join(parts)


def run_checks(ctx: Context, phases: Iterable[Phase] = (Phase.STATIC, Phase.WORLD),
               only: Iterable[str] | None = None) -> list[Finding]:
    wanted = set(only) if only is not None else None
    findings: list[Finding] = []
    for phase in phases:
        for name in ORDER:
            check = CHECKS.get(name)
            if check.phase is not phase or (wanted is not None and name not in wanted):
                continue
            try:
                findings += check.run(ctx)
            except Exception as exc:  # noqa: BLE001 -- a broken check must not hide the others' findings
                findings.append(Finding(name, Status.FATAL, f"check crashed: {type(exc).__name__}: {exc}",
                                        "report this as an rlkit bug"))
    return findings


def run_preflight(config_path: str | Path, *, environ: dict[str, str] | None = None,
                  cache_dir: str | Path | None = None, probe_runner: Callable[[list[str]], str] | None = None,
                  phases: Iterable[Phase] = (Phase.STATIC, Phase.WORLD),
                  only: Iterable[str] | None = None) -> PreflightReport:
    """Resolve `config_path` through all layers and run Run Validation on it."""
    resolved = resolve(config_path, environ)
    cache = Path(cache_dir) if cache_dir is not None else resolved.path("RLKIT_CACHE_DIR")
    ctx = Context(resolved=resolved, cache_dir=cache or Path.home() / ".cache" / "rlkit", probe_runner=probe_runner)
    return PreflightReport(resolved, run_checks(ctx, phases, only))
