"""One generic registry keyed by name, used for scaffolds, sandbox backends,
tool parsers, loggers and checks.

Entries are either objects registered with the decorator or lazy "module:attr"
strings, so heavy backends are only imported when picked.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator

from rlkit.errors import UserError


def import_string(path: str) -> object:
    """Import "pkg.module:attr"."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise UserError(f"{path!r} is not of the form 'module:attr'", fix="write it as pkg.module:ClassName")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise UserError(f"{module_name} has no attribute {attr!r}", fix="check the spelling") from exc


class Registry[T]:
    """Name -> entry, with duplicate detection and did-you-mean errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, entry: T | str | None = None) -> Callable[[T], T] | None:
        """`reg.register("x", "pkg.mod:Cls")` or `@reg.register("x")`."""
        if entry is not None:
            self._add(name, entry)
            return None

        def decorator(obj: T) -> T:
            self._add(name, obj)
            return obj

        return decorator

    def _add(self, name: str, entry: T | str) -> None:
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry

    def get(self, name: str) -> T:
        if name not in self._entries:
            if ":" in name:  # user plug-in: "module:attr"
                return import_string(name)  # type: ignore[return-value]
            raise UserError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}",
                            fix=self.suggest(name))
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = import_string(entry)  # type: ignore[assignment]
            self._entries[name] = entry
        return entry  # type: ignore[return-value]

    def suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self._entries), n=1)
        return f"did you mean {close[0]!r}?" if close else f"pick one of: {', '.join(sorted(self._entries))}"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
