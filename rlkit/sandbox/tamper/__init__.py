"""Sandbox tamper check: which of an agent's changes can steer its verifier, judged by effect.

After the agent's turn, once its processes are gone and before the tests run, the sandbox is
compared with its image (`changes.snapshot`) and every change is judged against what the image
looks like to a verifier (`profile.ImageProfile`: PATH, the tools the verifier runs, each Python
interpreter's import path, the library folders), probed once per image before any agent ran:

    profile = await ensure_profile(environment, image_id)      # at sandbox start
    snap = await snapshot(environment)                         # after the agent
    verdict = await judge(snap.changes, profile, snap.files, snap.workdir, "/tests")

`verdict.findings` stop the trial (tamper_suspect); `verdict.remove` (bytecode caches) and
`verdict.rebuild_loader_cache` are undone before the tests; `verdict.notes` are inert and
only recorded. What is flagged and why: `rules.py` and `_python.py`.
"""

from rlkit.sandbox.tamper.changes import (
    Change,
    ChangeKind,
    Snapshot,
    find_changes_script,
    from_docker_diff,
    from_find_output,
    overlay_changes,
    snapshot,
)
from rlkit.sandbox.tamper.profile import ImageProfile, Interpreter, ensure_profile, parse_probe
from rlkit.sandbox.tamper.pytest_command import UNKNOWN, ConfigScope, config_scope
from rlkit.sandbox.tamper.rules import Finding, Judge, Verdict, judge, report

__all__ = [
    "UNKNOWN", "Change", "ChangeKind", "ConfigScope", "Finding", "ImageProfile", "Interpreter", "Judge", "Snapshot", "Verdict",
    "config_scope", "ensure_profile", "find_changes_script", "from_docker_diff", "from_find_output", "judge",
    "overlay_changes", "parse_probe", "report", "snapshot",
]
