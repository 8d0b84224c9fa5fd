"""The offline base image: rlkit's build (mmdebstrap's tarball piped into `docker import`) against the
debootstrap way it replaced (debootstrap into a folder, apt's lists and caches deleted, tar into `docker
import`), the same suite, variant and packages, alternating, in the same run.

    .venv/bin/python bench/base_image.py [--rounds 1]

Both download every package from the host's Debian mirror on each round (neither keeps a cache between
rounds), as on a new machine, where this image is what the first docker test waits on. Times are wall
seconds and the whole machine's busy CPU seconds (/proc/stat: `docker import` runs in dockerd, outside
this process tree), so run it on an idle machine. Needs root, dockerd, mmdebstrap and debootstrap
(`apt-get install debootstrap`: setup.sh installs only mmdebstrap). Each round's image goes to a
throwaway tag, removed after; rlkit/base:bookworm is never touched. Prints each way and the ratio
rlkit / debootstrap.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cpu_ledger import machine_busy_s  # after the repo root is on sys.path


def debootstrap_way(ref: str, mirror: str) -> None:
    """The former build: a root folder by debootstrap, then tar into docker import."""
    from rlkit.sandbox.base_image import BaseImageRecipe

    recipe = BaseImageRecipe()
    with tempfile.TemporaryDirectory(prefix="bench-debootstrap-") as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
                        recipe.suite, str(root), mirror], check=True, capture_output=True)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (root / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", ref], stdin=tar.stdout, check=True, capture_output=True)
        if tar.wait() != 0:
            raise RuntimeError("tar failed")


def rlkit_way(ref: str, mirror: str) -> None:
    from rlkit.sandbox.base_image import BaseImageRecipe, ensure_base_image

    recipe = BaseImageRecipe(image=ref, extra={"bench": uuid.uuid4().hex})  # a new hash: always built
    ensure_base_image(recipe, force=True, mirror=mirror, log=lambda _msg: None)
    subprocess.run(["docker", "rmi", "-f", recipe.hashed_tag()], check=False, capture_output=True)


def timed(build: Callable[[str, str], None], mirror: str) -> tuple[float, float, int]:
    ref = f"rlkit-bench/base-{uuid.uuid4().hex[:8]}:latest"
    cpu, wall = machine_busy_s(), time.monotonic()
    build(ref, mirror)
    wall, cpu = time.monotonic() - wall, machine_busy_s() - cpu
    size = int(subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", ref], check=True,
                              capture_output=True, text=True).stdout)
    subprocess.run(["docker", "rmi", "-f", ref], check=False, capture_output=True)
    return wall, cpu, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    missing = [tool for tool in ("mmdebstrap", "debootstrap", "docker") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        print(f"needs root and {', '.join(missing) or 'nothing more'}: apt-get install mmdebstrap debootstrap",
              file=sys.stderr)
        return 2
    from rlkit.sandbox.base_image import host_debian_mirror
    from rlkit.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()
    mirror = host_debian_mirror()
    ways = {"debootstrap (floor)": debootstrap_way, "rlkit (mmdebstrap)": rlkit_way}
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ways}
    for round_ in range(1, args.rounds + 1):
        for name, build in ways.items():
            wall, cpu, size = timed(build, mirror)
            results[name].append((wall, cpu, size))
            print(f"round {round_}  {name:20s} {wall:6.1f} s  {cpu:6.1f} cpu-s  {size / 1e6:4.0f} MB", flush=True)
    floor, ours = (results[name] for name in ways)
    med = statistics.median
    print(f"\nmedian over {args.rounds} round(s): rlkit / debootstrap = "
          f"{med(w for w, _, _ in ours) / med(w for w, _, _ in floor):.2f}x the time, "
          f"{med(c for _, c, _ in ours) / med(c for _, c, _ in floor):.2f}x the CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
