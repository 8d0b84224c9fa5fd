"""Third-party task folders are untrusted (issue 48): `rlkit index build` and `rlkit tasks check` read them
through rlkit.config.files. A FIFO, a link out of the folder or a huge file is refused with a message naming
it (never copied into the index, never a hang or a MemoryError); timeouts are finite and in range; a
Dockerfile the daemon rejects is a task's problem, not a traceback."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from rlkit.errors import ImageError, UserError
from rlkit.tasks.task import folder_problem, load_task
from tests.tasks.conftest import EXAMPLES


def _bounded(fn, *args, **kwargs):
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(120)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"{fn} blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture
def task(tmp_path: Path) -> Path:
    dest = tmp_path / "tasks" / "merge-intervals"
    shutil.copytree(EXAMPLES / "merge-intervals", dest)
    return dest


def _replace(path: Path, kind: str, outside: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link_out":
        path.symlink_to(outside)
    elif kind == "proc_environ":
        path.symlink_to("/proc/self/environ")
    elif kind == "sparse":
        with path.open("wb") as f:
            f.truncate(4 * 2**30)


@pytest.mark.parametrize(("rel", "kind", "said"), [
    ("instruction.md", "link_out", "leads out of its folder"), ("instruction.md", "proc_environ", "leads out"),
    ("instruction.md", "fifo", "FIFO"), ("instruction.md", "sparse", "too big"),
    ("solution/solve.sh", "fifo", "FIFO"), ("tests/test.sh", "link_out", "leads out"),
    ("environment/app/data.bin", "fifo", "FIFO"), ("environment/app/big.bin", "sparse", "too big"),
    ("environment/app/secret", "link_out", "leads out"), ("task.toml", "link_out", "leads out"),
])
def test_a_task_folder_with_a_special_or_outside_file_is_refused(task: Path, tmp_path: Path, rel: str, kind: str,
                                                                 said: str) -> None:
    outside = tmp_path / "shadow"
    outside.write_text("root:SHADOW-CONTENT\n")
    _replace(task / rel, kind, outside)
    problem = _bounded(folder_problem, task)
    assert problem is not None and said in problem and rel.split("/")[-1] in problem
    with pytest.raises(UserError) as err:
        _bounded(load_task, task)
    assert "SHADOW" not in str(err.value) and said in str(err.value)


def test_index_build_refuses_it_and_copies_nothing(task: Path, tmp_path: Path, capsys) -> None:
    from rlkit.cli.main import main as rlkit

    _replace(task / "instruction.md", "proc_environ", tmp_path)
    out = tmp_path / "index.parquet"
    rc = _bounded(rlkit, ["index", "build", str(task.parent), "-o", str(out)])
    text = capsys.readouterr()
    assert rc != 0 and not out.exists()
    assert "Traceback" not in text.err + text.out and "instruction.md" in text.err + text.out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5.0", "0", "1e300", '"x"', "9" * 400])
@pytest.mark.parametrize("table", ["agent", "verifier"])
def test_timeouts_are_finite_and_in_range(task: Path, value: str, table: str) -> None:
    toml = (task / "task.toml").read_text()
    start = toml.index(f"[{table}]")
    end = toml.index("timeout_sec", start)
    line_end = toml.index("\n", end)
    (task / "task.toml").write_text(toml[:end] + f"timeout_sec = {value}" + toml[line_end:])
    with pytest.raises(UserError) as err:
        load_task(task)
    assert "timeout_sec" in str(err.value)


@pytest.mark.parametrize(("key", "value"), [("cpus", "9" * 400), ("memory_mb", "nan"), ("cpus", "0")])
def test_resources_are_finite_and_in_range(task: Path, key: str, value: str) -> None:
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", toml))
    with pytest.raises(UserError, match=key):
        load_task(task)
    (task / "task.toml").write_text(toml.replace("[metadata]", f"[metadata]\npass_rate = {'9' * 400}"))
    with pytest.raises(UserError, match="pass_rate"):
        load_task(task)


def test_the_shipped_tasks_pass_the_folder_check() -> None:
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "task.toml").is_file()):
        assert folder_problem(folder) is None, folder
        load_task(folder)


def test_tasks_check_names_an_unsafe_folder_without_building_it(task: Path) -> None:
    from rlkit.rollout.task_check import check_tasks
    from rlkit.tasks.images import read_task_spec

    _replace(task / "environment" / "pipe", "fifo", task)
    [health] = _bounded(asyncio.run, check_tasks([read_task_spec(task)], trials_root=task.parent / "trials"))
    assert not health.ok and "environment/pipe" in health.problems[0] and "FIFO" in health.problems[0]


def test_a_dockerfile_the_daemon_rejects_is_an_image_error() -> None:
    """The daemon answers a build it refuses with an HTTP error (docker.errors.APIError): a task's finding."""
    import docker.errors

    from rlkit.sandbox.images import build_image

    class Refusing:  # the Engine API's answer to a Dockerfile it cannot parse, as the SDK raises it
        def build(self, **_kw):
            raise docker.errors.APIError("400 Client Error", explanation="dockerfile parse error line 1: unknown "
                                                                         "instruction: FROMM")

    with pytest.raises(ImageError) as err:
        build_image(Refusing(), EXAMPLES / "merge-intervals" / "environment", "rlkit-test/refused:latest")
    assert "dockerfile parse error" in err.value.message


@pytest.mark.docker
def test_a_dockerfile_the_real_daemon_rejects_is_a_task_finding(task: Path) -> None:
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import read_task_spec

    (task / "environment" / "Dockerfile").write_text("FROMM nothing\nRUN [\n")
    spec = read_task_spec(task, task_id="rlkit-test-refused-dockerfile")
    [outcome] = build_task_images([spec], force=True)
    assert outcome.status == "failed" and outcome.detail
