"""Task image naming (owned by rlkit.tasks), discovery (dirs and parquet index) and building."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rlkit.errors import UserError
from rlkit.sandbox.images import SOURCE_LABEL, build_task_images, source_digest, source_tag
from rlkit.tasks.images import discover_tasks, read_task_spec, task_image_ref
from tests.sandbox._helpers import write_task

ROOT = Path(__file__).resolve().parents[2]


def test_task_image_ref_naming() -> None:
    assert task_image_ref("calc") == "rlkit-task/calc:latest"
    assert task_image_ref("Django__Issue#123", registry="reg.io:5000/team/") == \
        "reg.io:5000/team/rlkit-task/django__issue-123:latest"
    assert task_image_ref("calc", variant="ohsdk") == "rlkit-task/calc:ohsdk"
    assert task_image_ref("terminal-bench/regex-log") == "rlkit-task/terminal-bench-regex-log:latest"
    with pytest.raises(UserError):
        task_image_ref("###")


def test_discover_tasks_from_dirs(tmp_path: Path) -> None:
    write_task(tmp_path, "b-task")
    write_task(tmp_path, "a-task", task_toml='[environment]\ndocker_image = "python:3.12"\n')
    named = write_task(tmp_path, "c-dir")
    (named / "task.toml").write_text('version = "1.0"\n[task]\nname = "org/c-named"\n')
    (tmp_path / "not-a-task").mkdir()
    specs = discover_tasks(tmp_path)
    assert [(s.task_id, s.image, s.prebuilt) for s in specs] == [
        ("a-task", "python:3.12", True), ("b-task", "rlkit-task/b-task:latest", False),
        ("org/c-named", "rlkit-task/org-c-named:latest", False)]
    assert specs[1].dockerfile == tmp_path / "b-task" / "environment" / "Dockerfile"
    assert [s.task_id for s in discover_tasks(tmp_path / "b-task")] == ["b-task"]
    with pytest.raises(UserError, match="no task directories"):
        discover_tasks(tmp_path / "not-a-task")
    with pytest.raises(UserError, match="does not exist"):
        discover_tasks(tmp_path / "missing")


def test_discover_tasks_from_parquet_index(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_task(tmp_path / "tasks", "calc")
    pq.write_table(pa.table({"task_id": ["calc-1", "remote"], "task_source": ["tasks/calc", "https://x/y.git"]}),
                   tmp_path / "train.parquet")
    specs = discover_tasks(tmp_path / "train.parquet")
    assert [(s.task_id, s.task_dir) for s in specs] == [("calc-1", (tmp_path / "tasks" / "calc").resolve()),
                                                        ("remote", None)]


def test_bad_task_toml_is_a_user_error(tmp_path: Path) -> None:
    task = write_task(tmp_path, "broken")
    (task / "task.toml").write_text("[task\n")
    with pytest.raises(UserError, match="cannot parse"):
        read_task_spec(task)


def _remove_images(task: str) -> None:
    """Every tag of the task's image repository (the name it is given and its source-hash tags)."""
    repo = task_image_ref(task).rsplit(":", 1)[0]
    tags = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", repo],
                          capture_output=True, text=True, check=False).stdout.split()
    if tags:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, check=False)


def test_source_digest_follows_every_file_of_the_build_context(tmp_path: Path) -> None:
    context = write_task(tmp_path, "calc") / "environment"
    first = source_digest(context)
    assert first == source_digest(context) and len(first) == 12
    (context / "Dockerfile").write_text((context / "Dockerfile").read_text() + "RUN true\n")
    edited = source_digest(context)
    (context / "data.txt").write_text("x")
    added = source_digest(context)
    (context / "data.txt").chmod(0o755)
    executable = source_digest(context)
    assert len({first, edited, added, executable}) == 4
    assert source_tag("rlkit-task/calc:latest", first) == f"rlkit-task/calc:src-{first}"
    assert source_tag("reg.io:5000/rlkit-task/calc", "abc") == "reg.io:5000/rlkit-task/calc:src-abc"


@pytest.mark.docker
def test_build_task_images_builds_then_caches(tmp_path: Path, base_image: str, docker_api) -> None:
    name = f"rlkit-test-build-{uuid.uuid4().hex[:6]}"
    write_task(tmp_path, name)
    write_task(tmp_path, "prebuilt", task_toml='[environment]\ndocker_image = "rlkit/base:bookworm"\n')
    write_task(tmp_path, "prebuilt-absent", task_toml='[environment]\ndocker_image = "somewhere/else:1"\n')
    broken = write_task(tmp_path, "zz-broken", dockerfile="FROM rlkit/base:bookworm\nRUN exit 7\n")
    unpullable = write_task(tmp_path, "zz-unpullable", dockerfile="FROM docker.io/library/python:3.12-slim\n")
    seen: list[tuple[int, int]] = []
    try:
        outcomes = build_task_images(discover_tasks(tmp_path), progress=lambda d, t, _label: seen.append((d, t)))
        assert [(o.task_id, o.status) for o in outcomes] == [
            ("prebuilt", "prebuilt"), ("prebuilt-absent", "missing"), (name, "built"), (broken.name, "failed"),
            (unpullable.name, "failed")]
        # a docker_image that is not here is not "ready"; a base that cannot be pulled says what to do
        assert "not on this docker host" in outcomes[1].detail and "docker load" in outcomes[1].detail
        assert "exit 7" in outcomes[3].detail or "non-zero code" in outcomes[3].detail
        assert "hint:" not in outcomes[3].detail
        assert "hint: the Dockerfile's base image (docker.io/library/python:3.12-slim)" in outcomes[4].detail
        assert "rlkit images base" in outcomes[4].detail
        assert seen[-1] == (5, 5)
        labels = docker_api.inspect_image(task_image_ref(name))["Config"]["Labels"]
        assert labels["rlkit.task"] == name
        again = build_task_images(discover_tasks(tmp_path / name))
        assert [o.status for o in again] == ["cached"]
    finally:
        _remove_images(name)


@pytest.mark.docker
def test_images_cli_build(tmp_path: Path, base_image: str) -> None:
    name = f"rlkit-test-cli-{uuid.uuid4().hex[:6]}"
    write_task(tmp_path, name)
    try:
        proc = subprocess.run([sys.executable, "-m", "rlkit", "images", "build", str(tmp_path), "--no-base"],
                              cwd=ROOT, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        assert f"✓ {name}  built" in proc.stdout and "1/1 images ready" in proc.stdout
        assert "1/1" in proc.stderr  # the progress bar
        push = subprocess.run([sys.executable, "-m", "rlkit", "images", "build", str(tmp_path), "--push"],
                              cwd=ROOT, capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert push.returncode == 2 and "✗ FATAL" in push.stderr and "REGISTRY" in push.stderr
    finally:
        _remove_images(name)


@pytest.mark.docker
def test_a_trial_after_a_dockerfile_edit_runs_the_rebuilt_image(tmp_path: Path, base_image: str, docker_api) -> None:
    """Task images follow their sources: the next trial (and `rlkit images build`) rebuilds an edited task."""
    import asyncio

    from rlkit.rollout.trial import TrialSpec, run_trial

    name = f"rlkit-test-rebuild-{uuid.uuid4().hex[:6]}"
    buggy = "FROM rlkit/base:bookworm\nWORKDIR /app\nRUN printf 'def add(a, b):\\n    return a - b\\n' > calc.py\n"
    fixed = buggy.replace("a - b", "a + b")
    task = write_task(tmp_path, name, dockerfile=buggy)
    dockerfile = task / "environment" / "Dockerfile"

    def nop_reward(session: str) -> float:  # nop changes nothing: the reward says which image ran
        outcome = asyncio.run(run_trial(TrialSpec(task_dir=task, agent="nop", trials_root=tmp_path / "trials",
                                                  session=session, environment_kwargs={"network": "none"})))
        assert outcome.reason in ("passed", "failed_tests"), outcome
        return outcome.reward

    def source_label() -> str:
        return docker_api.inspect_image(task_image_ref(name))["Config"]["Labels"][SOURCE_LABEL]

    try:
        assert nop_reward("first") == 0.0  # built from the buggy Dockerfile
        assert source_label() == source_digest(dockerfile.parent)
        dockerfile.write_text(fixed)
        assert nop_reward("after-edit") == 1.0  # the next trial ran the rebuilt image
        assert source_label() == source_digest(dockerfile.parent)
        assert docker_api.inspect_image(source_tag(task_image_ref(name), source_digest(dockerfile.parent)))
        assert [o.status for o in build_task_images(discover_tasks(task))] == ["cached"]
        dockerfile.write_text(buggy)  # back to sources built before: renamed from their hash tag, not rebuilt
        assert [o.status for o in build_task_images(discover_tasks(task))] == ["cached"]
        assert source_label() == source_digest(dockerfile.parent) and nop_reward("back") == 0.0
        dockerfile.write_text(buggy + "RUN true\n")
        assert [o.status for o in build_task_images(discover_tasks(task))] == ["built"]
    finally:
        _remove_images(name)
