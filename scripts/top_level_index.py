"""Writes `top_level.txt` into each distribution of this interpreter's environment that lacks one.

Why: transformers calls `importlib.metadata.packages_distributions()` when it is imported
(transformers/utils/import_utils.py). For a distribution without `top_level.txt`, Python infers
its top-level names from its RECORD and stat()s every file listed there first. In .venv that is
~44,000 stat calls (torch alone lists 14,700 files): 0.8 s of CPU in every process that imports
transformers, which is each Ray actor of verl's trainer, each proxy and each trainer process.
With the files there, Python reads the names from them: 0.81 -> 0.08 s, and `import verl`
takes 4.7 s of CPU instead of 5.8 s.

The names written are the ones Python infers itself (`importlib.metadata._top_level_inferred`),
so `packages_distributions()` maps the same; checked before exit, and undone if not. The file is
added to RECORD (replaced, not edited in place: uv hard-links installed files to its cache), so
an uninstall removes it with the rest. Idempotent. scripts/setup.sh runs it with each venv's own
interpreter after installing (Python 3.11 and 3.12 infer differently).

Usage: <venv>/bin/python scripts/top_level_index.py [--path DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path


def record_line(root: Path) -> bytes:
    return f"{root.name}/top_level.txt,,\n".encode()


def replace_record(root: Path, data: bytes) -> None:
    tmp = root / "RECORD.rlkit-tmp"
    tmp.write_bytes(data)
    os.replace(tmp, root / "RECORD")


def index(dist: metadata.Distribution) -> Path | None:
    """Writes the dist's top_level.txt when it has none; its .dist-info folder, or None if nothing was written."""
    if dist.read_text("top_level.txt") is not None:
        return None
    root = getattr(dist, "_path", None)  # PathDistribution: the .dist-info folder
    if not isinstance(root, Path) or not root.name.endswith(".dist-info") or not (root / "RECORD").is_file():
        return None
    names = sorted(n for n in metadata._top_level_inferred(dist) if n)
    if not names or any(len(n.split()) != 1 for n in names):
        return None  # nothing to declare, or a name that the file's whitespace split would break
    record = (root / "RECORD").read_bytes()
    (root / "top_level.txt").write_text("\n".join(names) + "\n")
    replace_record(root, record + (b"\n" if record and not record.endswith(b"\n") else b"") + record_line(root))
    return root


def undo(root: Path) -> None:
    (root / "top_level.txt").unlink(missing_ok=True)
    replace_record(root, (root / "RECORD").read_bytes().replace(record_line(root), b""))


def mapping(dists: Iterable[metadata.Distribution]) -> dict[str, list[str]]:
    """What `packages_distributions()` returns for these distributions (its own two rules), order aside."""
    out: dict[str, list[str]] = {}
    for dist in dists:
        for name in metadata._top_level_declared(dist) or metadata._top_level_inferred(dist):
            out.setdefault(name, []).append(dist.metadata["Name"])
    return {k: sorted(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", action="append", help="index the distributions in DIR (default: sys.path)")
    args = parser.parse_args(argv)

    def dists() -> list[metadata.Distribution]:
        return list(metadata.distributions(path=args.path) if args.path else metadata.distributions())

    before = mapping(dists())
    written = [root for root in map(index, dists()) if root is not None]
    if mapping(dists()) != before:
        for root in written:
            undo(root)
        print("top_level_index: the package mapping would change; the files were removed again", file=sys.stderr)
        return 1
    print(f"top_level_index: {len(written)} top_level.txt file(s) written ({args.path or sys.prefix})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
