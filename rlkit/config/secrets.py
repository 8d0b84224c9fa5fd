"""Secrets are masked by value, wherever they appear.

A secret (a key declared `secret=True`, e.g. WANDB_API_KEY) can reach output by paths
other than its own line: another value that references it (`EXP_NAME=run-${WANDB_API_KEY}`),
an error that quotes a rejected line, a command in the launch plan, a log line. So
output is masked by the secret's value, not by the key that printed it:

    text = mask_secrets(text, resolved)          # check, DRY_RUN, the launch plan
    handler.addFilter(SecretFilter(secret_values(resolved)))   # logs: on handlers (a logger's own
                                                               # filters miss propagated records)

Values shorter than MIN_SECRET_CHARS are not masked inside other text (masking "1"
would garble every number); the configuration block still hides them whole.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

MASK = "****"
MIN_SECRET_CHARS = 4


def secret_values(source: Any) -> list[str]:
    """The secret values known to `source`: a ResolvedConfig (its `secrets`) or strings."""
    values = getattr(source, "secrets", source)
    if isinstance(values, str):
        values = [values]
    found = {v for v in values or () if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
    return sorted(found, key=len, reverse=True)  # longest first: a secret inside another is masked whole


def mask_secrets(text: str, source: Any) -> str:
    """`text` with every known secret value replaced by ****."""
    for value in secret_values(source):
        if value in text:
            text = text.replace(value, MASK)
    return text


def candidate_values(raw: str) -> Iterable[str]:
    """What a rejected secret line's value may be shown as: whole, unquoted, and its words."""
    raw = raw.strip()
    yield raw
    unquoted = raw.strip("'\"")
    yield unquoted
    yield from unquoted.split()


class SecretFilter(logging.Filter):
    """A logging filter that masks secret values in every record it passes."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = secret_values(list(secrets))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_secrets(message, self.secrets)
        if masked != message:
            record.msg, record.args = masked, None
        return True
