"""The ohsdk agent image from cold caches: rlkit's bake (uv installs a site-packages on the host, the build
compiles what trials import) against the pip way it replaced (a host `pip wheel` wheelhouse, then
`pip install` into the venv inside the build, every module compiled), in the same run, alternating.

    .venv/bin/python bench/agent_image.py [--rounds 1]

Cold: every build gets an empty download cache (UV_CACHE_DIR / PIP_CACHE_DIR in a temporary folder) and
no staged site-packages, as on a new machine. Times are wall seconds and the whole machine's busy CPU
seconds (/proc/stat: docker's build runs outside this process tree), so run it on an idle machine.
Each build's Dockerfile gets a fresh label after FROM, so docker's build cache is never reused.
It replaces rlkit/agent-ohsdk with an equal image; task images layered on the old one re-layer when next used.
The floor is the pip way; prints each and the ratio rlkit / pip. A new machine builds this image once,
beside the first tests of the suite, so its CPU is taken from them.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def busy_cpu_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def pip_way(ref: str) -> None:
    """The former bake: a wheelhouse on the host, `pip install` (compiling everything) in the build."""
    from rlkit.sandbox.base_image import BASE_IMAGE
    from rlkit.scaffolds import bake, get_scaffold

    recipe = get_scaffold("ohsdk").image_recipe
    python_prefix = bake._host_python312()
    python = f"{bake.AGENTS_ROOT}/ohsdk/python"
    env = " ".join(f"{key}={value}" for key, value in recipe.offline_env.items())
    reqs = " ".join(f"'{r}'" for r in recipe.pip_requirements)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        subprocess.run([str(python_prefix / "bin" / "python3.12"), "-m", "pip", "wheel", "-q", "-w",
                        str(ctx / "wheels"), *recipe.pip_requirements], check=True)
        shutil.copytree(python_prefix, ctx / "python", symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "test", "tests", "idlelib", "tkinter",
                                                      "turtledemo", "*.a"))
        (ctx / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\nLABEL bench={uuid.uuid4().hex}\nCOPY python {python}\nCOPY wheels /tmp/wheels\n"
            f"RUN echo {python}/lib > {bake._PYTHON_LDCONF} && ldconfig"
            f" && {python}/bin/python3.12 -m venv {bake.OHSDK_VENV}"
            f" && {bake.OHSDK_VENV}/bin/pip install -q --no-index --find-links /tmp/wheels {reqs}"
            f" && env {env} {bake.OHSDK_VENV}/bin/python -c 'import openhands.sdk, openhands.tools'"
            " && rm -rf /tmp/wheels\n")
        subprocess.run(["docker", "build", "-q", "--network", "none", "-t", ref, str(ctx)], check=True,
                       capture_output=True)


def rlkit_way(ref: str) -> None:
    from rlkit.scaffolds import bake

    site = bake.CACHE_DIR / "ohsdk"
    aside = site.with_name("ohsdk.bench-aside")
    if site.exists():
        site.rename(aside)  # no staged site-packages: as on a new machine
    dockerfile = bake._dockerfile_ohsdk
    # A label right after FROM: no step of an earlier build's cache is reused.
    bake._dockerfile_ohsdk = lambda s: dockerfile(s).replace("\n", f"\nLABEL bench={uuid.uuid4().hex}\n", 1)
    try:
        bake.build_agent_image("ohsdk", force=True, log=lambda _m: None)
    finally:
        bake._dockerfile_ohsdk = dockerfile
        shutil.rmtree(site, ignore_errors=True)
        if aside.exists():
            aside.rename(site)
    subprocess.run(["docker", "tag", bake.agent_image_ref(bake.get_scaffold("ohsdk")), ref], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"pip": [], "rlkit": []}
    for round_ in range(1, args.rounds + 1):
        for name, build in (("pip", pip_way), ("rlkit", rlkit_way)):
            ref = f"rlkit/agent-ohsdk-bench:{name}"
            with tempfile.TemporaryDirectory() as caches:
                os.environ["UV_CACHE_DIR"] = os.environ["PIP_CACHE_DIR"] = caches
                wall0, cpu0 = time.monotonic(), busy_cpu_s()
                build(ref)
                wall, cpu = time.monotonic() - wall0, busy_cpu_s() - cpu0
            size = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", ref], capture_output=True,
                                  text=True, check=True).stdout.strip()
            subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)
            results[name].append((wall, cpu))
            print(f"round {round_} {name:5}: {wall:6.1f} s, {cpu:6.1f} cpu-s, image {int(size) / 2**20:,.0f} MiB",
                  flush=True)
    med = {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for name, r in results.items()}
    print(f"pip (the floor): {med['pip'][0]:.1f} s, {med['pip'][1]:.1f} cpu-s")
    print(f"rlkit:           {med['rlkit'][0]:.1f} s, {med['rlkit'][1]:.1f} cpu-s")
    print(f"ratio rlkit/pip: wall {med['rlkit'][0] / med['pip'][0]:.2f}x, cpu {med['rlkit'][1] / med['pip'][1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
