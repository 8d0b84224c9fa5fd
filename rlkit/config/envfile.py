"""A safe `.env` reader. Configs are data, never executed.

Supported: `KEY=VALUE`, an optional `export ` prefix, blank lines, `#` comments (whole
line, or after whitespace in an unquoted value), 'single quotes' (fully literal),
"double quotes" (with \\" \\\\ \\$ escapes) and `${KEY}` references to other config keys,
which the resolver expands across layers. Command substitution `$(...)`, backticks and
bare `$NAME` are rejected with a fix, so nothing in a config can run.

Every error names the file, the line, the key and the fix; the reader collects them
all instead of stopping at the first one. Lines end at `\n` only (a trailing `\r` of a
CRLF file is dropped), so line numbers match every editor; any other control character
in a setting is an error naming it. A UTF-8 byte-order mark is skipped with a note.
Errors never quote the value of a key listed in `secret_keys` or named like a credential
(`rlkit.config.secrets.is_secret_name`: HF_TOKEN, openai_api_key, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rlkit.config.files import FileReadError, clip, read_bytes
from rlkit.config.ranges import control_char
from rlkit.config.secrets import is_secret_name
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
    notes: list[ConfigError] = field(default_factory=list)  # harmless oddities (a byte-order mark)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (key, raw value) of lines with an error

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
    hash_at = value.find("#")
    if hash_at > 0 and re.search(r"\s", value[hash_at:]) and not re.search(r"\s", value[:hash_at]):
        return _error("'#' starts a comment only after whitespace, so this value runs on into the comment",
                      f"put a space before '#': {key}={value[:hash_at]} #{value[hash_at + 1:]}", path, lineno, key)
    if re.search(r"\s", value):
        return _error("unquoted value contains whitespace", f'quote it: {key}="{value}"', path, lineno, key)
    for bad in (";", "|", "&", "<", ">"):
        if bad in value:
            return _error(f"unquoted {bad!r} (shell syntax is not supported)",
                          "quote the value if the character is meant literally", path, lineno, key)
    return re.sub(r"\\([\\$`])", r"\1", value), False


def _lines(text: str) -> list[str]:
    """Lines split at \\n only (str.splitlines also splits at \\f, \\v, \\x85, \\u2028 and a lone \\r)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def _redact(message: str, fix: str, secret: bool) -> tuple[str, str]:
    if not secret:
        return message, fix
    return message.split(":", 1)[0] + " (value hidden: a secret)", fix.split(":", 1)[0]


def parse_env_text(text: str, path: str, secret_keys: frozenset[str] = frozenset()) -> EnvFile:
    result = EnvFile(path=path)
    if text.startswith("\ufeff"):
        text = text[1:]
        result.notes.append(_error("the file starts with a UTF-8 byte-order mark (skipped)",
                                   "save it as UTF-8 without a BOM (most editors: 'UTF-8', not 'UTF-8 with BOM')",
                                   path, 1))
    seen: dict[str, Entry] = {}
    for lineno, line in enumerate(_lines(text), start=1):
        stripped = line.strip(" \t")
        if not stripped or stripped.isspace() or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip(" \t")
        name, eq, raw = stripped.partition("=")
        word = (name if eq else stripped).split()[0] if (name if eq else stripped).split() else ""
        guessed = word if KEY_RE.fullmatch(word) else None
        secret = guessed is not None and (guessed in secret_keys or is_secret_name(guessed))
        bad = control_char(stripped.replace("\t", " "))  # tabs are whitespace here
        if bad:
            result.errors.append(_error(f"control character {bad} in the line", "delete it (values are plain "
                                        "text on one line; a file saved with old Mac line ends has lone \\r)",
                                        path, lineno, guessed))
            if guessed:
                result.rejected.append((guessed, raw))
            continue
        if not eq:
            shown = f"{guessed} ..." if secret else clip(stripped, 60)
            result.errors.append(_error(f"not a KEY=VALUE line: {shown!r}",
                                        "configs hold only KEY=VALUE lines and # comments (nothing is run)",
                                        path, lineno, guessed))
            if guessed:
                result.rejected.append((guessed, stripped[len(word):]))
            continue
        if name != name.rstrip():
            result.errors.append(_error(f"space before '=' in {clip(name.strip(), 60)!r}",
                                        f"write {clip(name.strip(), 60)}=VALUE", path, lineno, guessed))
            if guessed:
                result.rejected.append((guessed, raw))
            continue
        if not KEY_RE.fullmatch(name):
            result.errors.append(_error(f"invalid key name {clip(name, 60)!r}", "keys are letters, digits and _ "
                                        "(not starting with a digit)", path, lineno, None))
            continue
        if raw[:1].isspace():
            result.errors.append(_error("space after '='", f"write {name}=VALUE (quote values with spaces)",
                                        path, lineno, name))
            result.rejected.append((name, raw))
            continue
        parsed = parse_value(raw, path, lineno, name)
        if isinstance(parsed, ConfigError):
            parsed.message, parsed.fix = _redact(parsed.message, parsed.fix, secret)
            if not secret:
                parsed.message, parsed.fix = clip(parsed.message, 240), clip(parsed.fix, 240)
            result.errors.append(parsed)
            result.rejected.append((name, raw))
            continue
        entry = Entry(name, parsed[0], path, lineno, literal=parsed[1])
        if name in seen:
            result.duplicates.append((seen.pop(name), entry))  # the later line wins, at its own place
        seen[name] = entry
    result.entries = list(seen.values())
    return result


def read_env_file(path: str | Path, display: str | None = None,
                  secret_keys: frozenset[str] = frozenset()) -> EnvFile:
    """`display` is the name errors and provenance use (default: the path as given).

    Any file that cannot be read as UTF-8 text raises ConfigError naming it (and the line and
    byte offset of the first undecodable byte)."""
    p = Path(path)
    try:
        data = read_bytes(p)
    except FileReadError as exc:
        fix = {"does not exist": "check the path (relative paths are from the current directory)",
               "is a directory, not a file": "pass the .env file"}.get(exc.reason, "pass a readable .env file")
        message = f"config file not found: {exc.file}" if exc.reason == "does not exist" else f"config file {exc.message}"
        raise ConfigError(message, fix=fix, file=exc.file) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{clip(str(p), 200)} is not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset "
                          f"{exc.start} (line {line}) cannot be decoded", fix="save the config as UTF-8",
                          file=clip(str(p), 200), line=line) from None
    return parse_env_text(text, display or str(path), secret_keys)
