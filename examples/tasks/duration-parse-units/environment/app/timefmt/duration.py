"""Human-readable durations."""

import re

_PATTERN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?")


def parse_duration(text):
    """'1h30m' -> 5400 (seconds)."""
    match = _PATTERN.fullmatch(text)
    if not match or not text:
        raise ValueError(f"bad duration: {text!r}")
    hours, minutes = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60


def format_duration(seconds):
    """5400 -> '1h30m'; 0 -> '0s'."""
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
