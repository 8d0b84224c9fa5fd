"""The pieces of grading by construction, without docker: the task's declaration, what a work
product carries, where the verifier's pytest reads config, and the verifier's own test record."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import pytest

from rlkit.errors import UserError
from rlkit.rollout._test_record import RecordPlan, collected_count, plan, read_junit, verdict
from rlkit.rollout.trial import _reason_for
from rlkit.sandbox.tamper import Change, ImageProfile, config_scope, judge
from rlkit.sandbox.work_product import WorkProductError, carry
from rlkit.tasks.grading import GradingSpec, read_grading_spec
from tests.rollout.conftest import EXAMPLES


# ---- [verifier.rlkit] in task.toml ---------------------------------------------------------------
def _task(tmp_path: Path, table: str) -> Path:
    (tmp_path / "task.toml").write_text(f'version = "1.0"\n\n[verifier]\ntimeout_sec = 60.0\n{table}')
    return tmp_path


def test_a_task_is_graded_clean_by_default_and_carries_its_working_dir():
    spec = read_grading_spec(EXAMPLES / "merge-intervals")
    assert spec == GradingSpec() and spec.mode_for("/app") == "clean" and spec.product_paths("/app") == ["/app"]
    assert spec.mode_for("/") == "in-place"  # nothing to carry


def test_a_task_declares_in_place_grading_or_its_paths(tmp_path: Path):
    spec = read_grading_spec(_task(tmp_path, '\n[verifier.rlkit]\ngrading = "in-place"\n'))
    assert spec.mode_for("/app") == "in-place"
    spec = read_grading_spec(_task(tmp_path, '\n[verifier.rlkit]\nwork_product = ["/srv/site/", "/app"]\n'))
    assert spec.product_paths("/") == ["/srv/site", "/app"] and spec.mode_for("/") == "clean"


def test_harbor_reads_a_task_with_the_rlkit_table(tmp_path: Path):
    from harbor.models.task.config import TaskConfig

    text = (EXAMPLES / "merge-intervals" / "task.toml").read_text() + '\n[verifier.rlkit]\ngrading = "in-place"\n'
    assert TaskConfig.model_validate_toml(text).verifier.timeout_sec == 120.0


@pytest.mark.parametrize("table, key", [
    ('grading = "elsewhere"', "verifier.rlkit.grading"),
    ('work_product = ["app"]', "verifier.rlkit.work_product"),
    ('work_product = ["/etc/nginx"]', "verifier.rlkit.work_product"),
    ('work_product = ["/"]', "verifier.rlkit.work_product"),
    ("surprise = 1", "verifier.rlkit.surprise"),
])
def test_a_bad_declaration_names_file_key_and_fix(tmp_path: Path, table: str, key: str):
    with pytest.raises(UserError) as caught:
        read_grading_spec(_task(tmp_path, f"\n[verifier.rlkit]\n{table}\n"))
    assert caught.value.key == key and caught.value.file.endswith("task.toml") and caught.value.fix


# ---- the work product -------------------------------------------------------------------------------
def _archive(build) -> list[bytes]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        build(tar)
    data = buf.getvalue()
    return [data[i:i + 1000] for i in range(0, len(data), 1000)]


def _add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **extra) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, len(data), extra.pop("mode", 0o644)
    for key, value in extra.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def test_only_regular_files_and_folders_inside_the_path_are_carried():
    def build(tar):
        _add(tar, "app", tarfile.DIRTYPE, mode=0o755)
        _add(tar, "app/fix.py", data=b"x = 1\n", mode=0o4755)
        _add(tar, "app/link", tarfile.SYMTYPE, linkname="/etc/shadow")
        _add(tar, "app/hard", tarfile.LNKTYPE, linkname="app/fix.py")
        _add(tar, "app/fifo", tarfile.FIFOTYPE)
        _add(tar, "app/__pycache__/fix.cpython-311.pyc", data=b"forged")
        _add(tar, "app/../etc/passwd", data=b"root::0:0::/:/bin/sh\n")
        _add(tar, "other/x.py", data=b"y\n")

    carried = carry(_archive(build), "/app", 1 << 20)
    with tarfile.open(fileobj=io.BytesIO(carried.archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["app", "app/fix.py"]
    assert members["app/fix.py"].mode == 0o755  # no set-uid bit
    assert (carried.files, carried.bytes, carried.dropped_count) == (1, 6, 6)
    assert {d.split()[0] for d in carried.dropped} == {"symlink", "hardlink", "fifo", "cache", "outside"}


def test_a_product_over_its_bound_is_refused():
    with pytest.raises(WorkProductError, match="more than 100 bytes"):
        carry(_archive(lambda tar: _add(tar, "app/big", data=b"0" * 500)), "/app", 100)
    assert _reason_for("WorkProductError") == "failed_tests"


# ---- where the verifier's pytest reads config -------------------------------------------------------
BUNDLED_SH = (EXAMPLES / "merge-intervals" / "tests" / "test.sh").read_text()
PLAIN_SH = "#!/bin/bash\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA\n"


def test_config_scope_follows_the_command():
    bundled = config_scope(BUNDLED_SH, "/app")
    assert bundled.ini_dirs == frozenset() and bundled.conftest_dirs == frozenset()  # -c /dev/null --noconftest
    plain = config_scope(PLAIN_SH, "/app")
    assert plain.ini_dirs == {"/tests", "/"} and plain.conftest_dirs == {"/tests", "/"}
    bare = config_scope("cd /app && pytest -q\n", "/")
    assert bare.ini_dirs == {"/app", "/"}
    for unknown in ("./run_tests.sh\n", "cd app; pytest\n", 'PYTEST_ADDOPTS=-x pytest /tests\n', "pytest $ARGS\n"):
        assert not config_scope(unknown, "/app").known, unknown


def test_a_config_file_the_command_cannot_read_is_no_finding():
    asyncio.run(_config_files_judged())


async def _config_files_judged() -> None:
    profile = ImageProfile(key="img", workdir="/app")
    changes = [Change("/app/pytest.ini", "A"), Change("/app/setup.cfg", "A"), Change("/app/conftest.py", "A")]
    for script in (BUNDLED_SH, PLAIN_SH):
        verdict_ = await judge(changes, profile, None, "/app", "/tests", config_scope(script, "/app"))
        assert verdict_.findings == [], script
    unknown = await judge(changes, profile, None, "/app", "/tests")  # a command rlkit cannot read: as before
    assert {f.rule for f in unknown.findings} == {"pytest_config"} and len(unknown.findings) == 3
    root = await judge([Change("/conftest.py", "A")], profile, None, "/app", "/tests", config_scope(PLAIN_SH, "/app"))
    assert [f.rule for f in root.findings] == ["pytest_config"]


# ---- the verifier's own record ----------------------------------------------------------------------
def test_the_record_is_planned_for_pytest_only():
    recorded = plan(BUNDLED_SH)
    assert recorded.kind == "pytest" and recorded.folder.startswith("/var/lib/rlkit-record-")
    assert plan(BUNDLED_SH).folder != recorded.folder  # a new name every trial
    assert recorded.env({"PYTEST_ADDOPTS": "-x"})["PYTEST_ADDOPTS"] == f"-x --junit-xml={recorded.file}"
    assert plan("#!/bin/bash\n[ -f /tmp/answer ] && echo 1 > /logs/verifier/reward.txt\n").kind == "exit-status"
    assert plan("pytest --junitxml=/logs/verifier/j.xml /tests\n").kind == "exit-status"


@pytest.mark.parametrize("output, count", [
    ("test_x.py::test_a\ntest_x.py::test_b\n\n2 tests collected in 0.01s\n", 2),
    ("============ test session starts ====\ncollected 5 items\n\n<Module test_graded.py>\n", 5),
    ("collected 5 items / 2 deselected / 3 selected\n", 3),
    ("3/5 tests collected (2 deselected) in 0.02s\n", 3),
    ("test_graded.py: 5\nother.py: 2\n", 7),
    ("no tests collected in 0.01s\n", 0),
    ("collected 0 items / 1 error\n\n==== 1 error in 0.1s ====\n", None),
    ("bash: pytest: command not found\n", None),
])
def test_the_pristine_count_is_read_at_every_verbosity(output: str, count: int | None):
    assert collected_count(output) == count


JUNIT = (b'<?xml version="1.0"?><testsuites><testsuite tests="3">'
         b'<testcase classname="t" name="a"/><testcase classname="t" name="b"><skipped/></testcase>'
         b'<testcase classname="t" name="c"/></testsuite></testsuites>')


def test_reward_1_needs_every_collected_test_passed_in_the_record():
    full = read_junit(JUNIT.replace(b"<skipped/>", b""))
    assert verdict(1.0, full, 3) is None
    assert "left no record" in verdict(1.0, read_junit(None), 3)
    assert "left no record" in verdict(1.0, read_junit(b"<testsuites><testsuite"), 3)
    assert "2 of the 3" in verdict(1.0, read_junit(JUNIT.replace(b'<testcase classname="t" name="c"/>', b"")), 3)
    assert "did not pass: skipped t::b" in verdict(1.0, read_junit(JUNIT), 3)
    assert verdict(0.0, read_junit(None), 3) is None  # a failing run is a failure already
    assert verdict(1.0, full, None) is None  # the pristine count unknown: the record alone
    assert _reason_for("TestsMissingError") == "tests_missing"
    assert RecordPlan("exit-status").env({}, collect=True)["PYTEST_ADDOPTS"].startswith("--collect-only")
