"""The before and after of a run's validation, as the quickstart's last line prints it."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.config.paths import RunPaths
from rlkit.monitor.validation import before_after, validations


def _write(root: Path, records: list[dict]) -> RunPaths:
    paths = RunPaths(root=root, project="p", exp="e")
    paths.logs.mkdir(parents=True)
    (paths.logs / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return paths


def test_the_first_and_last_validation_with_their_standard_errors(tmp_path: Path) -> None:
    paths = _write(tmp_path, [
        {"step": 0, "data": {"val/pass@1": 0.286, "val/pass@1_stderr": 0.06}},
        {"step": 1, "data": {"critic/rewards/mean": 0.3}},
        {"step": 4, "data": {"critic/rewards/mean": 0.4, "val/pass@1": 0.4}},
        {"step": 8, "data": {"critic/rewards/mean": 0.5, "val/pass@1": 0.536, "val/pass@1_stderr": 0.066}},
    ])
    assert [v.step for v in validations(paths)] == [0, 4, 8]
    assert before_after(paths) == ("validation pass@1: step 0 0.286 ± 0.060 -> step 8 0.536 ± 0.066 "
                                   "(gain +0.250; ± is 1 s.e.)")


def test_no_line_before_two_validations(tmp_path: Path) -> None:
    paths = _write(tmp_path, [{"step": 0, "data": {"val/pass@1": 0.3}}, {"step": 1, "data": {"x": 1.0}}])
    assert before_after(paths) is None
