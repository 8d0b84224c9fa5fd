"""`rlkit model tiny OUT_DIR`: build the embedded default policy."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "tiny":
        print("usage: rlkit model tiny OUT_DIR [--template qwen3_coder|hermes]")
        return 2
    from rlkit.embedded.tiny_model import main as tiny_main

    return tiny_main(argv[1:])
