"""The one place every message passes through before a terminal, a log or a file.

    clean(text, limit=None)     mask every secret (rlkit.config.secrets: whole, escaped, in part),
                                then show every control character escaped (ESC as \\x1b), then clip

Where text leaves the process, `clean` is applied:

    terminal   `install()` (the `rlkit` command calls it first) wraps sys.stdout and sys.stderr in
               a SafeStream: every print, every error, every library's message is cleaned per line
               (so is a run's log of them: `rlkit run` sends that output to logs/train_<MMDD>.out)
    logs       CleanFilter on log handlers (`install()` puts it on the root logger's handlers, the
               local trainer on its run's handlers; the verl trainer's tee masks each line)
    findings   Finding cleans and clips its message at construction (clip after masking)

Files a run writes from config values (the agent-loop YAML) never carry a secret: a secret's value
in any other key is FATAL before DRY_RUN or a run writes anything (the secret_spread check).

A rich console (live progress bars, tables) draws with escape sequences: `styled_output()`
gives it a SafeStream that keeps rich's own CSI sequences (colours, cursor moves, line erase)
and escapes every other control character (OSC titles and clipboard writes, DCS, bells,
backspaces, C1 controls), masking secrets all the same.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import threading
from typing import Any, TextIO

from rlkit.config.files import clip
from rlkit.config.ranges import escape_controls
from rlkit.config.secrets import mask_secrets

# The CSI sequences rich draws with: SGR colours, cursor up/down/column, erase in line/display,
# show/hide cursor. Anything else that starts with ESC is escaped even on a styled stream.
_RICH_CSI = re.compile(r"\x1b\[(?:[0-9;]*[mABCDGKJ]|\?25[hl])")
PENDING_MAX = 65536  # characters a stream holds while waiting for the end of a line


def clean(text: str, *, limit: int | None = None, secrets: Any = (), keep: str = "\n\t") -> str:
    """`text` safe to show: secrets masked, control characters escaped (except `keep`), then clipped."""
    text = escape_controls(mask_secrets(text, secrets), keep=keep)
    return clip(text, limit) if limit is not None else text


def _clean_styled(text: str) -> str:
    masked = mask_secrets(text)
    out, start = [], 0
    for m in _RICH_CSI.finditer(masked):
        out.append(escape_controls(masked[start:m.start()], keep="\n\t\r"))
        out.append(m.group(0))
        start = m.end()
    out.append(escape_controls(masked[start:], keep="\n\t\r"))
    return "".join(out)


class SafeStream(io.TextIOBase):
    """A text stream that cleans what is written to it, a whole line at a time (a secret split
    over two writes of one line is still masked). `styled`: rich's CSI sequences pass."""

    def __init__(self, stream: TextIO, *, styled: bool = False) -> None:
        super().__init__()
        self.stream = stream
        self.styled = styled
        self._pending = ""
        self._guard = threading.RLock()

    def _clean(self, text: str) -> str:
        return _clean_styled(text) if self.styled else clean(text)

    def write(self, text: str) -> int:
        with self._guard:
            data = self._pending + text
            cut = max(data.rfind("\n"), data.rfind("\r") if self.styled else -1)
            if cut < 0 and len(data) < PENDING_MAX:
                self._pending = data
                return len(text)
            head, self._pending = (data[:cut + 1], data[cut + 1:]) if cut >= 0 else (data, "")
            self.stream.write(self._clean(head))
        return len(text)

    def flush(self) -> None:
        with self._guard:
            if self._pending:
                pending, self._pending = self._pending, ""
                self.stream.write(self._clean(pending))
            self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except ValueError:  # the stream under it is closed (Ray's colorama asks at exit)
            return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.stream, "errors", None)

    def close(self) -> None:
        self.flush()


class CleanFilter(logging.Filter):
    """A logging filter that cleans every record it passes (secrets masked, controls escaped);
    `secrets`: values to mask besides the remembered ones."""

    def __init__(self, secrets: Any = ()) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 -- a bad format string: logging reports it itself
            return True
        cleaned = clean(message, secrets=self.secrets)
        if record.exc_text:
            record.exc_text = clean(record.exc_text, secrets=self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def _unwrapped(stream: TextIO) -> TextIO:
    return stream.stream if isinstance(stream, SafeStream) else stream  # type: ignore[return-value]


def install() -> None:
    """Every message this process writes to its terminal or its root logger's handlers is cleaned."""
    if not isinstance(sys.stdout, SafeStream) and sys.stdout is not None:
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream) and sys.stderr is not None:
        sys.stderr = SafeStream(sys.stderr)
    clean_log_handlers()


def clean_log_handlers(logger: logging.Logger | None = None) -> None:
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, CleanFilter) for f in handler.filters):
            handler.addFilter(CleanFilter())


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, SafeStream):
            stream.flush()


def styled_output(stream: TextIO | None = None) -> SafeStream:
    """The stream for a rich console: rich's colours and cursor moves pass, other controls are escaped."""
    return SafeStream(_unwrapped(stream or sys.stdout), styled=True)
