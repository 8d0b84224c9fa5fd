"""The offline base image: recipe hashing, mirror discovery, cached build."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from rlkit.errors import ImageError
from rlkit.sandbox.base_image import RECIPE_LABEL, BaseImageRecipe, ensure_base_image, host_debian_mirror


def test_recipe_digest_tracks_contents_not_order() -> None:
    base = BaseImageRecipe()
    assert base.digest() == BaseImageRecipe(packages=tuple(reversed(base.packages))).digest()
    assert base.digest() != BaseImageRecipe(packages=(*base.packages, "vim")).digest()
    assert base.digest() != BaseImageRecipe(suite="trixie").digest()
    assert base.hashed_tag() == f"rlkit/base:bookworm-{base.digest()}"
    for needed in ("python3", "python3-pytest", "git", "tmux", "procps", "ca-certificates", "curl", "bash", "tar"):
        assert needed in base.packages


def test_mirror_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    deb822 = tmp_path / "a"
    (deb822 / "sources.list.d").mkdir(parents=True)
    (deb822 / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    assert host_debian_mirror("bookworm", roots=(deb822,)) == "http://mirror.example/debian"
    one_line = tmp_path / "b"
    one_line.mkdir()
    (one_line / "sources.list").write_text("# x\ndeb [arch=amd64] http://ftp.example/debian bookworm main\n")
    assert host_debian_mirror("bookworm", roots=(one_line,)) == "http://ftp.example/debian"
    assert host_debian_mirror("bookworm", roots=(tmp_path / "none",)) == "http://deb.debian.org/debian"


@pytest.mark.docker
def test_base_image_is_labelled_cached_and_has_the_tools(base_image: str, docker_api) -> None:
    recipe = BaseImageRecipe()
    labels = docker_api.inspect_image(base_image)["Config"]["Labels"]
    assert labels[RECIPE_LABEL] == recipe.digest()
    lines: list[str] = []
    assert ensure_base_image(log=lines.append) == base_image
    assert lines == [f"✓ {base_image} is up to date (recipe {recipe.digest()})"]
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", base_image, "bash", "-c",
                          ("python3 -m pytest --version && git --version && tmux -V && ps --version && tar --version"
                           # apt's lists and caches stay out of the image
                           " && test -z \"$(find /var/lib/apt/lists /var/cache/apt -type f ! -name lock)\"")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "pytest" in (out.stdout + out.stderr) and "tmux" in out.stdout


@pytest.mark.docker
def test_images_built_from_the_base_never_replace_it(base_image: str, tmp_path: Path) -> None:
    """Derived images inherit the recipe label; re-running ensure_base_image must still
    tag the imported base, not a task image or scaffold layer built on top of it."""
    import docker

    recipe = BaseImageRecipe()
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nLABEL rlkit.test=derived\nRUN true\n")
    derived = "rlkit-test/derived-from-base:latest"
    subprocess.run(["docker", "build", "-q", "-t", derived, str(tmp_path)], check=True, capture_output=True)
    client = docker.from_env()
    try:
        base_id = client.images.get(recipe.hashed_tag()).id
        assert client.images.get(derived).labels.get(RECIPE_LABEL) == recipe.digest()
        assert ensure_base_image(recipe, log=lambda _msg: None) == recipe.image
        assert client.images.get(recipe.image).id == base_id
    finally:
        client.images.remove(derived, force=True)
        client.close()


# Writes the start of a real tarball (one file), then fails, as mmdebstrap does when the mirror drops mid-build.
FAILING_MMDEBSTRAP = """#!/bin/bash
echo "E: mirror went away" >&2
d=$(mktemp -d); echo half > "$d/etc-half"; tar -C "$d" -c . ; rm -r "$d"
exit 1
"""


@pytest.mark.docker
def test_a_failing_mmdebstrap_names_itself_and_leaves_no_image(dockerd, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in mmdebstrap (the only stand-in; dockerd and docker import are real) fails after writing part
    of a tarball: docker import takes what it got as an image, and the build must not leave it behind."""
    import docker

    if os.geteuid() != 0:
        pytest.skip("the base image is built as root")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mmdebstrap").write_text(FAILING_MMDEBSTRAP)
    (bin_dir / "mmdebstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    recipe = BaseImageRecipe(image="rlkit-test/base-failing:bookworm", extra={"test": uuid.uuid4().hex})
    with pytest.raises(ImageError, match="mmdebstrap failed \\(1\\):\n.*mirror went away"):
        ensure_base_image(recipe, mirror="http://127.0.0.1:9/debian", log=lambda _msg: None)
    client = docker.from_env()
    try:
        assert client.images.list(filters={"label": f"{RECIPE_LABEL}={recipe.digest()}"}) == []
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(recipe.hashed_tag())
    finally:
        client.close()
