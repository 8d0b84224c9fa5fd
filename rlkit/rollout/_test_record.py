"""The verifier's own record of a pytest run, against the tests collected from the pristine files.

A test.sh turns pytest's exit status into the reward; code the agent wrote runs inside that
pytest (the package under test) and can end it early with status 0. So for a task whose
test.sh runs pytest, the verifier keeps its own record:

* the count: test.sh run once with `--collect-only` in the clean container before the work
  product is copied in (the pristine test files against the image's own code);
* the record: pytest's built-in junit-xml writer, turned on through `PYTEST_ADDOPTS` (read by
  pytest itself, also under `python -I`) into a folder with a random name that the verifier
  makes after the agent is gone, and reads back through dockerd.

A reward > 0 needs the record to hold every collected test; a reward of 1 needs each of
them passed (a skip is not a pass). Otherwise the trial fails with `tests_missing`. A test.sh
that runs no pytest, or names its own junit-xml file, keeps the exit-status rule, and the
trial's record says so.
"""

from __future__ import annotations

import re
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

RECORD_ROOT = "/var/lib"
_PYTEST = re.compile(r"(^|[\s/;&|(])(py\.test|pytest)(\s|$)", re.MULTILINE)
_JUNIT = re.compile(r"--junit-?xml|junit_family|-p\s+no:junitxml", re.IGNORECASE)
# pytest's collection summaries at each verbosity
_COLLECTED = re.compile(r"^collected (\d+) items?(?: / (\d+) deselected)?(?: / (\d+) selected)?", re.MULTILINE)
_Q_COLLECTED = re.compile(r"^(\d+)(?:/\d+)? tests? collected", re.MULTILINE)
_QQ_FILE = re.compile(r"^\S+\.py: (\d+)$", re.MULTILINE)
_NONE = re.compile(r"^no tests collected", re.MULTILINE)
_ERRORS = re.compile(r"\b(\d+) errors?\b|^ERROR |Interrupted: ", re.MULTILINE)


class TestsMissingError(RuntimeError):
    """pytest's exit status said pass; the verifier's record of the run does not (`tests_missing`)."""


@dataclass
class RecordPlan:
    """Whether and where the verifier records a test run."""

    kind: str                 # "pytest" | "exit-status"
    why: str = ""
    folder: str = ""

    @property
    def file(self) -> str:
        return f"{self.folder}/junit.xml"

    def env(self, task_env: dict[str, str], collect: bool = False) -> dict[str, str]:
        own = "--collect-only -q -p no:cacheprovider" if collect else f"--junit-xml={self.file}"
        before = task_env.get("PYTEST_ADDOPTS", "")
        return {"PYTEST_ADDOPTS": f"{before} {own}".strip()}


def plan(test_sh: str) -> RecordPlan:
    """How the run of `test_sh` is recorded."""
    if not _PYTEST.search(test_sh):
        return RecordPlan("exit-status", "test.sh runs no pytest: the reward follows its exit status")
    if _JUNIT.search(test_sh):
        return RecordPlan("exit-status", "test.sh sets pytest's junit-xml itself: the reward follows its exit status")
    return RecordPlan("pytest", folder=f"{RECORD_ROOT}/rlkit-record-{secrets.token_hex(12)}")


def collected_count(output: str) -> int | None:
    """Tests the last pytest session of a `--collect-only` run selected (None: unknown, e.g. errors)."""
    if _ERRORS.search(output):
        return None
    found: list[tuple[int, int]] = []  # (position, count)
    for match in _COLLECTED.finditer(output):
        total, deselected, selected = (int(g) if g else None for g in match.groups())
        count = selected if selected is not None else (total or 0) - (deselected or 0)
        found.append((match.start(), count))
    found += [(m.start(), int(m.group(1))) for m in _Q_COLLECTED.finditer(output)]
    found += [(m.start(), 0) for m in _NONE.finditer(output)]
    if found:
        return max(found)[1]
    per_file = [int(m.group(1)) for m in _QQ_FILE.finditer(output)]
    return sum(per_file) if per_file else None


@dataclass
class RunRecord:
    present: bool
    tests: int = 0
    passed: int = 0
    not_passed: list[str] = field(default_factory=list)  # "outcome name"


def read_junit(data: bytes | None) -> RunRecord:
    """Testcases in a junit-xml document and how many passed (absent or unreadable: not present)."""
    if not data:
        return RunRecord(False)
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return RunRecord(False)
    record = RunRecord(True)
    for case in root.iter("testcase"):
        record.tests += 1
        bad = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        if bad is None:
            record.passed += 1
        elif len(record.not_passed) < 20:
            record.not_passed.append(f"{bad} {case.get('classname', '')}::{case.get('name', '')}")
    return record


def verdict(reward: float, record: RunRecord, expected: int | None) -> str | None:
    """Why a reward > 0 is not borne out by the record (None: it is)."""
    if reward <= 0:
        return None
    if not record.present:
        return "the tests' run left no record: pytest ended before it finished"
    if expected is not None and record.tests < expected:
        return f"the record holds {record.tests} of the {expected} tests collected from the pristine test files"
    if record.tests == 0:
        return "the record holds no test"
    if reward >= 1 and record.passed < record.tests:
        return f"{record.tests - record.passed} of {record.tests} tests did not pass: {', '.join(record.not_passed[:5])}"
    return None
