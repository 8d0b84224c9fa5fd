"""The trainer's stream as plain lines: what verl prints into logs/<exp>.log, Ray's own chatter into
logs/<exp>_ray.log.

Ray forwards every actor's output to the driver with a coloured `(TaskRunnerV1 pid=123, ip=...)`
prefix, so verl's step lines arrived as `\\x1b[36m(TaskRunnerV1 pid=4242)\\x1b[0m step:1 - ...` and
`grep '^step:'` found nothing. Each line loses its escapes and that prefix; lines of Ray itself (the
raylet's, the autoscaler's, the driver's `worker.py -- Connecting to ...`, log dedup notices) go to
Ray's log, so the run's log reads as the local trainer's does.
"""

from __future__ import annotations

import re

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# `(Name pid=N)`, `(Name pid=N, ip=A)`, `(pid=N)`, `(raylet)`, `(raylet, ip=A)`, `(autoscaler +2s)`
RAY_PREFIX_RE = re.compile(r"^\((?P<who>[A-Za-z_][\w.:-]*(?: \+\S+)?)?(?: ?pid=\d+)?(?:, ip=[^)\s]+)?\) ?")
RAY_OWN = ("raylet", "gcs_server", "autoscaler", "monitor", "dashboard", "log_monitor", "runtime_env")
# Ray's logger format in the driver: `2026-12-05 17:00:00,123\tINFO worker.py:1942 -- Connecting to ...`
RAY_RECORD_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                           r"[\w.]+\.py:\d+ -- ")
RAY_NOTICES = ("Ray deduplicates logs by default", "[repeated ", "Started a local Ray instance",
               "Connecting to existing Ray cluster")


def strip_escapes(raw: str) -> str:
    return ANSI_RE.sub("", raw)


def plain_line(raw: str) -> tuple[str, bool]:
    """(the line without escapes and Ray's prefix, whether it is Ray's own chatter)."""
    text = strip_escapes(raw)
    match = RAY_PREFIX_RE.match(text)
    who = ""
    if match and match.group(0).strip():
        who = (match.group("who") or "").split(" ")[0]
        text = text[match.end():]
    ray = who.startswith(RAY_OWN) or bool(RAY_RECORD_RE.match(text)) or text.lstrip().startswith(RAY_NOTICES)
    return text, ray
