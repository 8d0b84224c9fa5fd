"""examples/heldout-family: held-out members of the train tasks' families (bench/learning.py --family). Each is
its train task's code with other instruction constants and graded data; the reference fix still passes, while
no change and every decoy still fail."""

from __future__ import annotations

import filecmp
import tomllib
from pathlib import Path

import pytest

from tests.tasks.conftest import EXAMPLES, graded_on_host

FAMILY = EXAMPLES.parent / "heldout-family"
VARIANTS = sorted(p.parent for p in FAMILY.glob("*/task.toml"))


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    files = [p.relative_to(a) for p in a.rglob("*") if p.is_file()]
    return (not cmp.left_only and not cmp.right_only
            and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)
            and {p.relative_to(b) for p in b.rglob("*") if p.is_file()} == set(files))


def test_every_train_task_has_one_family_member_that_differs_only_in_constants_and_data() -> None:
    from rlkit.tasks.index import build_rows

    train = {r.task_id for r in build_rows(EXAMPLES, "train", val_fraction=0.3)}  # the embedded default's split
    assert {v.name for v in VARIANTS} == {f"{t}-b" for t in train}
    for variant in VARIANTS:
        origin = EXAMPLES / variant.name.removesuffix("-b")
        assert same_tree(variant / "environment", origin / "environment"), variant  # the code the patch meets
        assert same_tree(variant / "solution", origin / "solution"), variant
        assert filecmp.cmp(variant / "tests" / "test.sh", origin / "tests" / "test.sh", shallow=False)
        for name in ("instruction.md", "tests/test_graded.py"):  # what the agent reads, what grades it
            assert (variant / name).read_text() != (origin / name).read_text(), (variant, name)
        assert "heldout-family" in tomllib.loads((variant / "task.toml").read_text())["metadata"]["tags"]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda p: p.name)
def test_the_graded_data_passes_the_fix_and_fails_no_change_and_every_decoy(variant: Path, tmp_path: Path) -> None:
    """The graded suite run on the project as each candidate leaves it (the fix's patch applied on the host, no
    sandbox: this checks the data; the docker test below grades the real way)."""
    def graded(solve: Path | None) -> int:
        return graded_on_host(variant, solve, tmp_path)

    decoys = sorted((variant / "solution" / "decoys").glob("*.sh"))
    assert len(decoys) == 3
    assert graded(variant / "solution" / "solve.sh") == 0
    assert [graded(None), *(graded(d) for d in decoys)] == [1, 1, 1, 1]


@pytest.mark.docker
@pytest.mark.slow
def test_the_family_members_grade_in_docker_sandboxes_as_their_oracle_and_nop_say(base_image: str,
                                                                                 tmp_path: Path) -> None:
    import rlkit
    from rlkit.tasks.index import build_rows, write_index

    index = write_index(build_rows(FAMILY, "val"), tmp_path / "family.parquet")
    result = rlkit.tasks_check(index)
    assert result.ok and sorted(h.task_id for h in result.tasks) == [v.name for v in VARIANTS]
