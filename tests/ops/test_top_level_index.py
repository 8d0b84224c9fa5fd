"""scripts/top_level_index.py: top_level.txt for every distribution, so importing transformers
does not stat() every installed file (importlib.metadata.packages_distributions)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.fixtures.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "top_level_index.py"
top_level_index = load_script("scripts/top_level_index.py")


def _dist(site: Path, name: str, files: list[str], *, top_level: str | None = None) -> Path:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for file in files:
        (site / file).parent.mkdir(parents=True, exist_ok=True)
        (site / file).write_text("")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    listed = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in listed))
    return info


def test_each_dist_declares_what_python_inferred_and_an_uninstall_would_remove_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pkg = _dist(site, "pkgdist", ["pkg/__init__.py", "pkg/sub.py", "single.py", "data/file.txt"])
    declared = _dist(site, "declared", ["dec/__init__.py"], top_level="dec\n")
    empty = _dist(site, "empty", ["notes.txt"])
    before = top_level_index.mapping(metadata.distributions(path=[str(site)]))
    assert before == {"pkg": ["pkgdist"], "single": ["pkgdist"], "data": ["pkgdist"], "dec": ["declared"]}

    run = subprocess.run([sys.executable, str(SCRIPT), "--path", str(site)], check=False,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "1 top_level.txt file(s) written" in run.stdout
    assert (pkg / "top_level.txt").read_text().split() == ["data", "pkg", "single"]
    assert (pkg / "RECORD").read_text().splitlines()[-1] == "pkgdist-1.0.dist-info/top_level.txt,,"
    assert (declared / "top_level.txt").read_text() == "dec\n" and not (empty / "top_level.txt").exists()
    dist = next(d for d in metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "pkgdist")
    assert metadata._top_level_declared(dist) == ["data", "pkg", "single"]  # read, no longer inferred
    assert "pkgdist-1.0.dist-info/top_level.txt" in {str(f) for f in dist.files}  # RECORD lists it
    assert top_level_index.mapping(metadata.distributions(path=[str(site)])) == before

    again = subprocess.run([sys.executable, str(SCRIPT), "--path", str(site)], check=False,
                         capture_output=True, text=True)
    assert again.returncode == 0 and "0 top_level.txt file(s) written" in again.stdout
    assert (pkg / "RECORD").read_text().count("top_level.txt") == 1

    top_level_index.undo(pkg)
    assert not (pkg / "top_level.txt").exists() and "top_level" not in (pkg / "RECORD").read_text()


def test_the_venvs_are_indexed_by_setup() -> None:
    """scripts/setup.sh indexes .venv and .venv-vllm: transformers' import reads names, not 44k files."""
    for venv in (REPO / ".venv", REPO / ".venv-vllm"):
        python = venv / "bin" / "python"
        if not python.exists():
            pytest.fail(f"{venv} is missing; run bash scripts/setup.sh")
        code = ("import importlib.metadata as m\n"
                "print(sorted(d.metadata['Name'] for d in m.distributions() if m._top_level_declared(d) == []"
                " and any(n for n in m._top_level_inferred(d))))")
        missing = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        assert missing == "[]", f"{venv}: no top_level.txt in {missing}"
