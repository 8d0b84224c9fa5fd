"""Overrides: config keys given without a file (`rlkit.check(CFG, TRAIN_BSZ=8)`, `rlkit train CFG --set K=V`).

An override is read as a double-quoted value on a run config line would be: `${KEY}` references
expand across layers, while command substitution, backticks, a bare `$` and control characters are
errors naming the key, exactly as in a file. Python values become the text a file would hold
(True -> 1, a Path -> its text, None -> empty). The result is an `EnvFile` whose entries say
"override" where a file would say file:line, so the resolver layers them like any file.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from rlkit.config.envfile import KEY_RE, Entry, EnvFile, parse_value
from rlkit.config.files import clip
from rlkit.config.ranges import control_char
from rlkit.errors import ConfigError

ORIGIN = "override"


@dataclass(frozen=True)
class Override(Entry):
    """An entry from an override: it has no file and line, so it is shown as "override"."""

    @property
    def where(self) -> str:
        return ORIGIN


def as_text(value: object) -> str:
    """The text a config file would hold for a Python value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # past Python's digit limit: text no key's range accepts, so check names the key
            return f"{'-' if value < 0 else ''}<an integer of more than {sys.get_int_max_str_digits()} digits>"
    return str(value)


def parse_assignment(text: str) -> tuple[str, str]:
    """`KEY=VALUE` of `--set` (the value may be empty or hold further '=')."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise ConfigError(f"--set {clip(text, 60)!r} is not KEY=VALUE", key="--set",
                          fix="write --set KEY=VALUE, e.g. --set TRAIN_BSZ=8")
    return key, value


def override_entries(overrides: Mapping[str, object], secret_keys: frozenset[str] = frozenset()) -> EnvFile:
    """Overrides as the entries (and errors) of a file named "override"."""
    out = EnvFile(path=ORIGIN)
    for position, (key, value) in enumerate(overrides.items(), start=1):
        text = as_text(value)
        secret = key in secret_keys
        if not KEY_RE.fullmatch(key):
            out.errors.append(ConfigError(f"invalid key name {clip(key, 60)!r}", fix="keys are letters, digits "
                                          "and _ (not starting with a digit)", file=ORIGIN))
            continue
        bad = control_char(text)
        if bad:
            out.errors.append(ConfigError(f"control character {bad} in the value", key=key, file=ORIGIN,
                                          fix="values are plain text on one line"))
            out.rejected.append((key, text))
            continue
        quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parsed = parse_value(quoted, ORIGIN, position, key)
        if isinstance(parsed, ConfigError):
            if secret:  # the message may quote part of the value
                parsed.message = parsed.message.split(":", 1)[0] + " (value hidden: a secret)"
                parsed.fix = parsed.fix.split(":", 1)[0]
            parsed.line = None
            out.errors.append(parsed)
            out.rejected.append((key, text))
            continue
        out.entries.append(Override(key, parsed[0], ORIGIN, position, literal=parsed[1]))
    return out
