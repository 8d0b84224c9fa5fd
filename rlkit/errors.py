"""One error hierarchy for rlkit.

`UserError` is the user's mistake (config, arguments) and always carries a fix hint.
Runtime failures (sandbox, rollout, launch, proxy) carry structured fields and a
`retryable` marker so retry policies can filter on type instead of parsing messages.
Library code raises these; only the CLI turns them into exit codes.
"""

from __future__ import annotations

import re

# Control characters of a message (ESC, C1, bidi overrides) shown escaped: a name from a run's files or an
# argument reaches the terminal as text (the same set as rlkit.config.ranges.escape_controls; newline and tab kept).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\ufeff]")


def _escaped(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = ord(m.group(0))
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _CONTROLS.sub(one, text) if isinstance(text, str) else text


class RlkitError(Exception):
    """Base class of every error rlkit raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class UserError(RlkitError):
    """A mistake the user can fix: bad config, bad arguments, missing files."""

    def __init__(
        self,
        message: str,
        *,
        fix: str = "",
        key: str | None = None,
        file: str | None = None,
        line: int | None = None,
        **fields: object,
    ) -> None:
        super().__init__(_escaped(message), **fields)
        self.fix = _escaped(fix)
        self.key = _escaped(key) if key is not None else None
        self.file = _escaped(file) if file is not None else None
        self.line = line

    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def __str__(self) -> str:
        parts = [self.message]
        if self.key:
            parts.insert(0, f"[{self.key}]")
        if self.where():
            parts.append(f"({self.where()})")
        if self.fix:
            parts.append(f"— fix: {self.fix}")
        return " ".join(parts)


class ConfigError(UserError):
    """A run config (or site.env / axis module) that cannot be read or is invalid."""


class ArgumentError(UserError, TypeError):
    """An API function was given an argument it cannot take (a TypeError too, as Python's own would be)."""


class MissingExtraError(UserError):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"optional dependency {module!r} is not installed",
            fix=f"pip install 'rlkit[{extra}]'  (or: bash scripts/setup.sh)",
        )


class SandboxError(RlkitError):
    """A sandbox (container or pod) failed to start, exec, copy or stop."""

    retryable = True


class SandboxTimeout(SandboxError):
    """A command inside a sandbox ran past its timeout."""


class ImageError(SandboxError):
    """An image is missing or failed to build or push."""

    retryable = False


class GradingError(RlkitError):
    """The verifier could not produce a reward (reported, never raised into a step)."""


class ProxyError(RlkitError):
    """The proxy could not serve a request."""


class ContextExceededError(ProxyError):
    """A request is longer than the model's context window."""


class SessionBudgetError(ProxyError):
    """A session used up its calls or response tokens (the agent's episode is over)."""


class UpstreamError(ProxyError):
    """vLLM answered with an error or could not be reached."""

    retryable = True


class LaunchError(RlkitError):
    """Ray / vLLM / verl processes could not be started."""


class PreflightFailed(ConfigError):
    """Run Validation found a FATAL problem, so nothing was started. `report` holds every finding
    (a `rlkit.validate.preflight.PreflightReport`); key, file, line and fix are the first FATAL's."""

    def __init__(self, report: object, *, message: str, fix: str = "", key: str | None = None,
                 file: str | None = None, line: int | None = None) -> None:
        super().__init__(message, fix=fix, key=key, file=file, line=line)
        self.report = report


class TrainerUnavailable(ConfigError):
    """TRAINER names a trainer this version of rlkit cannot run."""


class TrainerFailed(LaunchError):
    """The trainer ran and exited with a non-zero code (its own output says why)."""

    def __init__(self, message: str, *, returncode: int) -> None:
        super().__init__(message, returncode=returncode)
        self.returncode = returncode
