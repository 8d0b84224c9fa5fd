"""`rlkit status` and the dashboard over a run folder whose files are hostile (issue 25): a FIFO or a
link to an endless device where a lock, a metric log or a step summary should be, deep JSON, terminal
escapes in the lock. They read through rlkit.config.files, so nothing blocks, nothing crashes, and
the terminal gets escapes shown escaped."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlkit.monitor.dashboard import create_app

EXP = "fx-crash"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"


def _bounded(fn, *args):
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except Exception as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"{fn} blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _replace(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero_link":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text("[" * 100_000)


@pytest.mark.parametrize("kind", ["fifo", "zero_link", "deep"])
def test_status_and_dashboard_never_block_on_special_run_files(run_copy, kind: str) -> None:
    root = run_copy("crashed")
    trials = root / "harbor_trials" / "embedded" / EXP
    for path in (root / "logs" / f"{EXP}.lock", root / "logs" / f"{EXP}.jsonl", root / "logs" / f"{EXP}.log",
                 root / "logs" / f"{EXP}_vllm.log", trials / "step_1" / "summary.json"):
        _replace(path, kind)
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect, render

    status = _bounded(lambda: collect(locate(EXP, root)))
    assert "step" in _bounded(render, status)
    client = TestClient(create_app(root), client=("127.0.0.1", 50000), base_url="http://127.0.0.1:8090")
    for url in ("/api/runs", f"/api/runs/{EXP}/metrics", f"/api/runs/{EXP}/vllm", f"/api/runs/{EXP}/status",
                f"/api/runs/{EXP}/steps", f"/api/runs/{EXP}/steps/1/trials"):
        assert _bounded(client.get, url).status_code == 200, url


def test_lock_fields_with_escapes_reach_the_status_text_escaped(run_copy) -> None:
    import datetime as dt

    from rlkit.config.display import clean
    from rlkit.monitor.run import locate
    from rlkit.monitor.status import collect, render

    root = run_copy("crashed")
    beat = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    (root / "logs" / f"{EXP}.lock").write_text(json.dumps({"pid": 1, "host": f"elsewhere{ESCAPES}", "heartbeat": beat,
                                                           "phase": f"rollout{ESCAPES}", "project": "embedded"}))
    text = clean(render(collect(locate(EXP, root))))  # what the rlkit command's stream prints
    assert "phase rollout\\x1b]0;pwned\\x07" in text and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)
