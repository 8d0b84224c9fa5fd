"""Host-side safety for log dirs a sandbox shares with the host through bind mounts.

An agent writes into /logs/agent (and /logs/artifacts) as root inside its sandbox. With
those dirs bind-mounted, a symlink it leaves there points into the *host's* filesystem
once host-side code (harbor's log parsing, rlkit's trajectory writer) opens it.
"""

from __future__ import annotations

import os
from pathlib import Path


def drop_symlinks(root: Path) -> int:
    """Unlink every symlink under `root`, never following one; returns how many went."""
    dropped = 0
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into symlinked dirs
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                path.unlink()
                dropped += 1
    return dropped
