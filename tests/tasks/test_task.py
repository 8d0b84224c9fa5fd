from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.errors import UserError
from rlkit.tasks.task import discover_tasks, load_task
from tests.tasks.conftest import EXAMPLES


def test_bundled_tasks_are_valid_harbor_tasks():
    tasks = discover_tasks(EXAMPLES)
    assert 8 <= len(tasks) <= 12
    for task in tasks:
        assert task.has_dockerfile and task.has_solution, task.task_id
        assert task.instruction.strip(), task.task_id
        assert task.difficulty in {"easy", "medium", "hard"}, task.task_id
        assert task.agent_timeout_sec and task.verifier_timeout_sec
        dockerfile = (task.path / "environment" / "Dockerfile").read_text()
        assert dockerfile.startswith("FROM rlkit/base:bookworm"), task.task_id
        assert "pip install" not in dockerfile  # no network at build time
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    assert [t.task_id for t in tasks] == sorted(t.task_id for t in tasks)


def test_bundled_test_scripts_always_write_a_reward():
    for test_sh in EXAMPLES.glob("*/tests/test.sh"):
        text = test_sh.read_text()
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        assert not any(line.strip().startswith(("set -e", "set -o errexit")) for line in code), test_sh
        assert "/logs/verifier/reward.txt" in text, test_sh


def test_load_task_reads_metadata_and_timeouts(make_task):
    path = make_task("t1", toml='[metadata]\ndifficulty = "Hard"\npass_rate = 0.25\n'
                               '[agent]\ntimeout_sec = 30.0\n[verifier]\ntimeout_sec = 9.0\n')
    task = load_task(path)
    assert task.task_id == "t1"
    assert task.difficulty == "hard" and task.pass_rate == 0.25
    assert task.agent_timeout_sec == 30.0 and task.verifier_timeout_sec == 9.0
    assert task.docker_image == "rlkit/base:bookworm" and not task.has_dockerfile
    assert task.instruction == "Fix it.\n"


def test_task_name_from_task_section(make_task):
    path = make_task("dir-name", toml='[task]\nname = "acme/real-name"\n')
    assert load_task(path).task_id == "acme/real-name"


@pytest.mark.parametrize("toml, key", [
    ("[metadata]\npass_rate = 1.5\n", "metadata.pass_rate"),
    ('[metadata]\npass_rate = "high"\n', "metadata.pass_rate"),
    ("[metadata]\ndifficulty = 3\n", "metadata.difficulty"),
])
def test_bad_metadata_names_key_and_file(make_task, toml, key):
    path = make_task("bad", toml=toml)
    with pytest.raises(UserError) as info:
        load_task(path)
    assert info.value.key == key
    assert info.value.file == str(path / "task.toml")
    assert info.value.fix


def test_task_without_image_or_dockerfile_is_rejected(make_task):
    path = make_task("noimg", docker_image=None)
    with pytest.raises(UserError, match="Dockerfile"):
        load_task(path)


def test_not_a_task_dir(tmp_path: Path):
    with pytest.raises(UserError, match="task.toml"):
        load_task(tmp_path)


def test_discover_rejects_duplicate_ids(make_task, tmp_path: Path):
    make_task("a", toml='[task]\nname = "org/same"\n')
    make_task("b", toml='[task]\nname = "org/same"\n')
    with pytest.raises(UserError, match="used twice"):
        discover_tasks(tmp_path / "tasks")


def test_discover_single_task_and_empty_dir(make_task, tmp_path: Path):
    path = make_task("only")
    assert [t.task_id for t in discover_tasks(path)] == ["only"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no task directories"):
        discover_tasks(tmp_path / "empty")
