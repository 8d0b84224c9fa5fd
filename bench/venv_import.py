"""What importing transformers costs a process of this venv, with and without `top_level.txt` files
(scripts/top_level_index.py, run by scripts/setup.sh).

    .venv/bin/python bench/venv_import.py [--reps 5]

transformers calls `importlib.metadata.packages_distributions()` at import; for a distribution without
top_level.txt Python infers the names by stat()ing every file its RECORD lists. Both ways are timed in
this run, on this venv's distributions: Python's inference (what an unindexed venv pays) against
reading the files (what an indexed one pays), as CPU seconds of this process. Then whole imports in
fresh processes (CPU of the child), against a bare `python -c pass` floor: `import transformers` and
`import verl`, which every Ray actor of verl's trainer, every proxy and every trainer process pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata


def cpu_of(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def child_cpu(code: str) -> float:
    before = os.times()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def written_by_index(dist: metadata.Distribution) -> bool:
    """scripts/top_level_index.py lists the file it wrote in RECORD without a hash; a wheel's own has one."""
    return any(str(f) == f"{f.parts[0]}/top_level.txt" and f.parts[0].endswith(".dist-info") and f.hash is None
               for f in dist.files or [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    dists = list(metadata.distributions())
    indexed = [d for d in dists if written_by_index(d)]
    declared = [d for d in dists if metadata._top_level_declared(d)]
    print(f"{sys.prefix}: {len(dists)} distributions, {len(declared)} with top_level.txt "
          f"({len(indexed)} written by scripts/top_level_index.py)")

    def inferred_all() -> None:  # as before the index: the written files are not read
        for dist in dists:
            (dist not in indexed and metadata._top_level_declared(dist)) or list(metadata._top_level_inferred(dist))

    def declared_all() -> None:
        for dist in dists:
            metadata._top_level_declared(dist) or list(metadata._top_level_inferred(dist))

    slow = statistics.median(cpu_of(inferred_all) for _ in range(args.reps))
    fast = statistics.median(cpu_of(declared_all) for _ in range(args.reps))
    print(f"top-level names of every distribution, CPU s (median of {args.reps}):")
    print(f"  as an unindexed venv reads them (RECORD inferred): {slow:.3f}")
    print(f"  as packages_distributions() reads them now: {fast:.3f}  ({slow / max(fast, 1e-6):.1f}x less)")

    floor = statistics.median(child_cpu("pass") for _ in range(args.reps))
    print(f"fresh process, CPU s (median of {args.reps}); floor `python -c pass` {floor:.3f}:")
    for code in ("import transformers", "import verl"):
        took = statistics.median(child_cpu(code) for _ in range(args.reps))
        print(f"  {code:<20} {took:6.2f}  ({took / max(floor, 1e-6):.0f}x the floor)")


if __name__ == "__main__":
    main()
