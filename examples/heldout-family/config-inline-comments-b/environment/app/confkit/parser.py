"""A small INI-style config parser."""


class ParseError(ValueError):
    pass


def _parse_value(raw):
    return raw.strip()


def loads(text):
    """'[s]\\nk = v' -> {'s': {'k': 'v'}}. Keys before any section go to section ''."""
    sections = {"": {}}
    current = sections[""]
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            current = sections.setdefault(stripped[1:-1].strip(), {})
            continue
        key, sep, raw = stripped.partition("=")
        if not sep or not key.strip():
            raise ParseError(f"line {number}: expected key = value")
        current[key.strip()] = _parse_value(raw)
    if not sections[""]:
        del sections[""]
    return sections
