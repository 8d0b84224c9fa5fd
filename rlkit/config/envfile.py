"""A safe `.env` reader. Configs are data, never executed.

Supported: `KEY=VALUE`, an optional `export ` prefix, blank lines, `#` comments (whole
line, or after whitespace in an unquoted value), 'single quotes' (fully literal),
"double quotes" (with \\" \\\\ \\$ escapes) and `${KEY}` references to other config keys,
which the resolver expands across layers. Command substitution `$(...)`, backticks and
bare `$NAME` are rejected with a fix, so nothing in a config can run.

Every error names the file, the line, the key and the fix; the reader collects them
all instead of stopping at the first one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.errors import ConfigError

KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Entry:
    """One `KEY=VALUE` line. `literal` values (single-quoted) are never expanded."""

    key: str
    value: str
    file: str
    line: int
    literal: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class EnvFile:
    path: str
    entries: list[Entry] = field(default_factory=list)
    errors: list[ConfigError] = field(default_factory=list)
    duplicates: list[tuple[Entry, Entry]] = field(default_factory=list)  # (earlier, later)

    def as_dict(self) -> dict[str, Entry]:
        return {e.key: e for e in self.entries}


def _error(msg: str, fix: str, path: str, line: int, key: str | None = None) -> ConfigError:
    return ConfigError(msg, fix=fix, key=key, file=path, line=line)


def _check_unquoted_dollars(text: str, path: str, lineno: int, key: str) -> ConfigError | None:
    """`${KEY}` is the only `$` form allowed outside single quotes."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            i += 2
            continue
        if ch == "`":
            return _error("backticks are command substitution, and configs are never executed", "write the "
                          "literal value (or wrap it in single quotes to keep the backticks as text)",
                          path, lineno, key)
        if ch == "$":
            rest = text[i + 1:]
            if rest.startswith("("):
                return _error("$(...) is command substitution, and configs are never executed",
                              "write the literal value (or wrap it in single quotes to keep it as text)",
                              path, lineno, key)
            m = re.match(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", rest)
            if m:
                i += 1 + m.end()
                continue
            if rest.startswith("{"):
                return _error("malformed ${...} reference (only ${KEY} is supported, no defaults or "
                              "operators)", "write ${OTHER_KEY}, or \\$ for a literal dollar", path, lineno, key)
            name = KEY_RE.match(rest)
            fix = f"write ${{{name.group(0)}}}" if name else "write \\$ for a literal dollar"
            return _error("bare $ in a value", fix, path, lineno, key)
        i += 1
    return None


def _unescape_double(text: str) -> str:
    return re.sub(r"\\([\\\"$`])", r"\1", text)


def parse_value(raw: str, path: str, lineno: int, key: str) -> tuple[str, bool] | ConfigError:
    """Returns (value, literal) or the error."""
    raw = raw.strip()
    if raw.startswith("'"):
        end = raw.find("'", 1)
        if end < 0:
            return _error("unterminated single quote", "close the quote on the same line (values are one line)",
                          path, lineno, key)
        rest = raw[end + 1:].strip()
        if rest and not rest.startswith("#"):
            return _error(f"unexpected text after the closing quote: {rest!r}",
                          "quote the whole value, or put a comment after ' #'", path, lineno, key)
        return raw[1:end], True
    if raw.startswith('"'):
        m = re.match(r'"((?:[^"\\]|\\.)*)"', raw)
        if not m:
            return _error("unterminated double quote", "close the quote on the same line (values are one line)",
                          path, lineno, key)
        rest = raw[m.end():].strip()
        if rest and not rest.startswith("#"):
            return _error(f"unexpected text after the closing quote: {rest!r}",
                          "quote the whole value, or put a comment after ' #'", path, lineno, key)
        body = m.group(1)
        err = _check_unquoted_dollars(body, path, lineno, key)
        return err if err else (_unescape_double(body), False)
    # Unquoted: a '#' after whitespace starts a comment.
    value = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
    if value.startswith("#"):
        value = ""
    err = _check_unquoted_dollars(value, path, lineno, key)
    if err:
        return err
    for bad in ("'", '"'):
        if bad in value:
            return _error(f"stray {bad} inside an unquoted value", "quote the whole value", path, lineno, key)
    if re.search(r"\s", value):
        return _error("unquoted value contains whitespace", f'quote it: {key}="{value}"', path, lineno, key)
    for bad in (";", "|", "&", "<", ">"):
        if bad in value:
            return _error(f"unquoted {bad!r} (shell syntax is not supported)",
                          "quote the value if the character is meant literally", path, lineno, key)
    return re.sub(r"\\([\\$`])", r"\1", value), False


def parse_env_text(text: str, path: str) -> EnvFile:
    result = EnvFile(path=path)
    seen: dict[str, Entry] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip()
        if "=" not in stripped:
            word = stripped.split()[0]
            result.errors.append(_error(f"not a KEY=VALUE line: {stripped[:60]!r}",
                                        "configs hold only KEY=VALUE lines and # comments (nothing is run)",
                                        path, lineno, word if KEY_RE.fullmatch(word) else None))
            continue
        name, _, raw = stripped.partition("=")
        if name != name.rstrip():
            result.errors.append(_error(f"space before '=' in {name.strip()!r}", f"write {name.strip()}=VALUE",
                                        path, lineno, name.strip()))
            continue
        if not KEY_RE.fullmatch(name):
            result.errors.append(_error(f"invalid key name {name!r}", "keys are letters, digits and _ "
                                        "(not starting with a digit)", path, lineno, None))
            continue
        if raw[:1].isspace():
            result.errors.append(_error("space after '='", f"write {name}=VALUE (quote values with spaces)",
                                        path, lineno, name))
            continue
        parsed = parse_value(raw, path, lineno, name)
        if isinstance(parsed, ConfigError):
            result.errors.append(parsed)
            continue
        entry = Entry(name, parsed[0], path, lineno, literal=parsed[1])
        if name in seen:
            result.duplicates.append((seen[name], entry))
            result.entries = [e for e in result.entries if e.key != name]
        seen[name] = entry
        result.entries.append(entry)
    return result


def read_env_file(path: str | Path, display: str | None = None) -> EnvFile:
    """`display` is the name errors and provenance use (default: the path as given)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}", fix="check the path (relative paths are from the "
                          "current directory)", file=str(p)) from None
    except IsADirectoryError:
        raise ConfigError(f"{p} is a directory, not a config file", fix="pass the .env file", file=str(p)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p} is not UTF-8 text ({exc.reason})", fix="save the config as UTF-8",
                          file=str(p)) from None
    return parse_env_text(text, display or str(path))
