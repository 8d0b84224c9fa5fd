"""Secrets: which values are secret, and masking them wherever they appear.

A value is secret when its key is declared `secret=True` in the schema (WANDB_API_KEY) or
when its name looks like a credential, in any case, in any layer or in the environment:
`*_TOKEN`, `*_KEY`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*` (HF_TOKEN,
OPENAI_API_KEY, GITHUB_TOKEN, wandb_api_key).

A secret reaches output by paths other than its own line: another value that references it
(`EXP_NAME=run-${WANDB_API_KEY}`), an error that quotes a rejected line, a list split at
commas, a message that escapes quotes and backslashes, a display clipped mid-value. So
output is masked by value, in every form the value can take there:

    whole            the value as written
    escaped          repr / JSON / shell quoting / control-character escaping of it
    in part          its pieces between separators (a list split at ',' shows them one by one)
    clipped          a prefix of it right before a clip marker "…"

The values are remembered for the process (`remember`, called by the resolver) so the one
place every message passes through (`rlkit.config.display.clean`) masks them without being
handed the config. Values shorter than MIN_SECRET_CHARS are not masked inside other text
(masking "1" would garble every number); the configuration block still hides them whole.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from rlkit.config.ranges import escape_controls

MASK = "****"
MIN_SECRET_CHARS = 4
MIN_PART_CHARS = 6  # a piece of a secret shorter than this is not masked on its own
MIN_ENV_SECRET_CHARS = 8  # an environment variable named like a credential ("USE_KEY=true" is not one)
PREFIX_SCAN_MAX = 512  # characters of a secret looked for before a clip marker
SECRET_NAME = re.compile(r"(?i)^(?:.*_TOKEN|TOKEN|.*_KEY|KEY|.*ACCESS_KEY.*|.*SECRET.*|.*PASSWORD.*|.*PASSWD.*"
                         r"|.*PASSPHRASE.*|.*CREDENTIALS?.*|.*_PAT)$")
_PARTS = re.compile(r"[\s,;:=/|&'\"`\\()\[\]{}<>]+")
CLIP_MARK = "…"

_lock = threading.Lock()
_remembered: frozenset[str] = frozenset()
_environment: frozenset[str] | None = None


def is_secret_name(name: str) -> bool:
    """Does a key or environment variable name look like a credential (case-insensitive)?"""
    return bool(SECRET_NAME.match(name))


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of environment variables named like credentials (long enough to be one)."""
    env = os.environ if environ is None else environ
    return {v for k, v in env.items() if len(v) >= MIN_ENV_SECRET_CHARS and is_secret_name(k)}


def remember(values: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
    """The secrets of the config this process runs (replacing the last config's) and of its environment."""
    global _remembered, _environment
    with _lock:
        _remembered = frozenset(v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS)
        _environment = frozenset(environment_secrets(environ))


def remembered() -> frozenset[str]:
    global _environment
    with _lock:
        if _environment is None:
            _environment = frozenset(environment_secrets())
        return _remembered | _environment


def secret_values(source: Any) -> list[str]:
    """The secret values known to `source`: a ResolvedConfig (its `secrets`) or strings."""
    values = getattr(source, "secrets", source)
    if isinstance(values, str):
        values = [values]
    found = {v for v in values or () if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
    return sorted(found, key=len, reverse=True)  # longest first: a secret inside another is masked whole


def forms(secret: str) -> set[str]:
    """Every form `secret` takes in a message: as is, escaped in the usual ways, and its pieces."""
    out = {secret, escape_controls(secret), escape_controls(secret, keep="")}
    slashed = secret.replace("\\", "\\\\")
    out |= {repr(secret)[1:-1], slashed.replace("'", "\\'"), slashed.replace('"', '\\"'),
            json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
            secret.encode("unicode_escape").decode("ascii"), shlex.quote(secret)}
    out |= {p for p in _PARTS.split(secret) if len(p) >= MIN_PART_CHARS}
    return {f for f in out if len(f) >= MIN_SECRET_CHARS}


_forms_cache: dict[str, tuple[str, ...]] = {}


def _all_forms(secrets: Iterable[str]) -> list[str]:
    found: set[str] = set()
    for s in secrets:
        cached = _forms_cache.get(s)
        if cached is None:
            cached = tuple(forms(s))
            if len(_forms_cache) < 4096:
                _forms_cache[s] = cached
        found.update(cached)
    return sorted(found, key=len, reverse=True)


def _mask_clipped(text: str, variants: list[str]) -> str:
    """A secret's prefix right before a clip marker ("…") is a secret shown in part."""
    out, start = [], 0
    pos = text.find(CLIP_MARK)
    while pos >= 0:
        cut = 0
        for v in variants:
            for k in range(min(len(v) - 1, pos - start, PREFIX_SCAN_MAX), MIN_SECRET_CHARS - 1, -1):
                if k > cut and text.startswith(v[:k], pos - k):
                    cut = k
                    break
        out.append(text[start:pos - cut] + (MASK if cut else "") + CLIP_MARK)
        start = pos + len(CLIP_MARK)
        pos = text.find(CLIP_MARK, start)
    out.append(text[start:])
    return "".join(out)


def mask_secrets(text: str, source: Any = ()) -> str:
    """`text` with every secret (remembered, plus those of `source`) masked in every form it takes."""
    secrets = remembered().union(secret_values(source))
    if not secrets or not text:
        return text
    variants = _all_forms(secrets)
    for value in variants:
        if value in text:
            text = text.replace(value, MASK)
    return _mask_clipped(text, variants) if CLIP_MARK in text else text


def candidate_values(raw: str) -> Iterable[str]:
    """What a rejected secret line's value may be shown as: whole, unquoted, and its words."""
    raw = raw.strip()
    yield raw
    unquoted = raw.strip("'\"")
    yield unquoted
    yield from (w for w in unquoted.split() if len(w) >= MIN_PART_CHARS)  # "x" of "KEY=secret x" is no secret
    yield from (p for p in _PARTS.split(unquoted) if len(p) >= MIN_PART_CHARS)
