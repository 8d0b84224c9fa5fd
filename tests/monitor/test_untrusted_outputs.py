"""A run's outputs are untrusted (issue 48): agents write trajectories and test output, and anyone who can
write under a shared OUTPUT_DIR can write the logs. One regression test per trigger found: `rlkit status`
and the dashboard skip a bad value or line (with a warning), never crash, never print invalid JSON,
never serve a file from outside the run's folders, and mask what `rlkit status` masks."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlkit.cli.main import main as rlkit
from rlkit.monitor import metrics, tail, trajectory, vllm_log
from rlkit.monitor.dashboard import create_app
from rlkit.monitor.run import locate
from rlkit.monitor.status import collect, render

EXP = "fx-crash"
TRIALS = Path("harbor_trials") / "embedded" / EXP
TRIAL_DIR = TRIALS / "step_1" / "word-frequency__933cda1f"
SECRET = "hf_Xy7Lk2Pq9Rt4Vm8Zn3Bw6Cd"


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


def _client(root: Path) -> TestClient:
    return TestClient(create_app(root), client=("127.0.0.1", 50000), base_url="http://127.0.0.1:8090")


def _status_json(root: Path, capsys) -> dict:
    capsys.readouterr()
    assert rlkit(["status", EXP, "--root", str(root), "--json"]) == 0
    return _strict(capsys.readouterr().out)  # type: ignore[return-value]


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def _live_lock(root: Path, **fields: object) -> None:
    beat = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lock = {"pid": 1, "host": "elsewhere", "heartbeat": beat, "project": "embedded", **fields}
    (root / "logs" / f"{EXP}.lock").write_text(json.dumps(lock))


@pytest.mark.parametrize("record", [
    '{"step": 1e999, "data": {"x": 1}}', '{"step": ' + "9" * 400 + ', "data": {"x": 1}}',
    '{"step": 3, "data": {"timing_s/step": 1e999, "critic/rewards/mean": ' + "1" * 400 + "}}",
    '{"step": 3, "data": {"timing_s/step": 1e308}}', '{"step": true, "data": {}}', '{"step": "3", "data": 5}',
])
def test_metric_or_step_out_of_range_is_skipped(run_copy, capsys, record: str) -> None:
    root = run_copy("crashed")
    _append(root / "logs" / f"{EXP}.jsonl", record + "\n")
    _live_lock(root)
    data = _status_json(root, capsys)
    assert data["step"] in (1, 3)
    assert data["eta_s"] is None or data["eta_s"] < 1e30
    render(collect(locate(EXP, root)))


def test_eta_overflow_prints_strict_json(run_copy, capsys) -> None:
    root = run_copy("crashed")
    attempts = root / "logs" / f"{EXP}_attempts.jsonl"
    attempts.write_text(json.dumps({"event": "attempt", "attempt": 1, "from_step": 0, "total_steps": 10**9}) + "\n")
    _append(root / "logs" / f"{EXP}.jsonl", json.dumps({"step": 2, "data": {"timing_s/step": 1e300}}) + "\n")
    _live_lock(root)
    data = _status_json(root, capsys)
    assert data["state"] == "running" and data["total_steps"] == 10**9
    assert data["eta_s"] is None or data["eta_s"] < 1e30


@pytest.mark.parametrize("where", ["attempts", "jsonl", "console"])
def test_attempt_marker_nested_deep_is_no_marker(run_copy, capsys, where: str) -> None:
    root = run_copy("crashed")
    deep = '{"event": "attempt", "from_step": 0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    target = {"attempts": f"{EXP}_attempts.jsonl", "jsonl": f"{EXP}.jsonl", "console": f"{EXP}.log"}[where]
    line = ("[rlkit] attempt " if where == "console" else "") + deep
    _append(root / "logs" / target, line + "\n")
    assert metrics.parse_attempt(line) is None
    assert _status_json(root, capsys)["step"] == 1


def test_console_step_of_5000_digits_is_no_step_line(tmp_path: Path) -> None:
    line = "step:" + "7" * 5000 + " - critic/rewards/mean:1.0 - x:2"
    assert metrics.parse_console_line(line) is None
    log = tmp_path / "logs" / "exp.log"
    log.parent.mkdir()
    log.write_text("step:1 - critic/rewards/mean:0.5\n" + line + "\n")
    from rlkit.config.paths import RunPaths

    assert [s for s, _ in metrics.tail(RunPaths(tmp_path, "p", "exp")).records] == [1]
    assert metrics.parse_value("9" * 5000) is None and metrics.parse_value("1e999") is None


def test_vllm_line_with_numbers_that_are_not_numbers(run_copy, capsys) -> None:
    bad = ("INFO 11-30 14:44:01 [loggers.py:335] Engine 000: Avg prompt throughput: 1.2.3 tokens/s, Avg generation "
           "throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 1.0%")
    assert vllm_log.parse_line(bad) is None
    assert vllm_log.parse_line(bad.replace("1.2.3", "9" * 5000)) is None
    root = run_copy("crashed")
    _append(root / "logs" / f"{EXP}_vllm.log", bad + "\n")
    assert _status_json(root, capsys)["vllm"]["time"] != "11-30 14:44:01"  # the last good line, not the bad one
    client = _client(root)
    assert client.get(f"/api/runs/{EXP}/vllm").status_code == 200


def test_lock_heartbeat_without_timezone(run_copy, capsys) -> None:
    root = run_copy("crashed")
    _live_lock(root, heartbeat=dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(timespec="seconds"))
    data = _status_json(root, capsys)
    assert data["state"] == "running" and data["heartbeat_age_s"] is not None
    assert _client(root).get("/api/runs").status_code == 200


@pytest.mark.parametrize("trials", ['"many"', "[1, 2]", "1e999", "-5", '{"a": 1}'])
def test_summary_with_trials_of_the_wrong_type(run_copy, capsys, trials: str) -> None:
    root = run_copy("crashed")
    summary = root / TRIALS / "step_1" / "summary.json"
    data = json.loads(summary.read_text())
    text = json.dumps({**data, "trials": "@T@", "outcomes": {"passed": "x", "failed_tests": 2.5, "error": [1]},
                       "sessions": "nope"}).replace('"@T@"', trials)
    summary.write_text(text)
    assert _status_json(root, capsys)["first_step"] == 1
    client = _client(root)
    for url in ("/api/runs", f"/api/runs/{EXP}/status", f"/api/runs/{EXP}/steps", f"/api/runs/{EXP}/steps/1/trials"):
        assert client.get(url).status_code == 200, url


def test_torn_line_past_the_bound_is_skipped_and_counted(run_copy, capsys) -> None:
    root = run_copy("crashed")
    attempts = root / "logs" / f"{EXP}_attempts.jsonl"
    marker = json.dumps({"event": "attempt", "attempt": 2, "from_step": 0, "total_steps": 2})
    with attempts.open("wb") as f:
        f.write(marker.encode() + b"\n" + b'{"event": "attempt", "x": "' + b"a" * (tail.MAX_LINE + 10) + b"\n")
    data = _status_json(root, capsys)
    assert data["attempt"]["attempt"] == 2  # the marker before the torn line is still read
    assert any(f"{EXP}_attempts.jsonl: skipped 1 line" in w for w in data["warnings"])


def test_readers_of_a_huge_line_read_past_it(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"first\n" + b"z" * (3 * tail.MAX_LINE) + b"\nlast\n" + b"y" * (tail.MAX_LINE + 5))
    skips = tail.Skips()
    assert list(tail.lines_from_end(path, skips=skips)) == ["last", "first"]
    assert list(tail.lines_from_start(path, skips=skips)) == ["first", "last"]
    lt = tail.LineTail(path, skips=skips)
    got = []
    for _ in range(10):
        got += lt.poll(tail.MAX_LINE + 1)
    assert got == ["first", "last"]
    found = list(metrics.step_lines_from_end(path.with_name("c.log"), 1 << 30))
    assert found == []
    console = tmp_path / "c.log"
    console.write_bytes(b"step:1 - a:1\n" + b"q" * (2 * tail.MAX_LINE) + b"\nstep:2 - a:2\n")
    assert [metrics.parse_console_line(x)[0] for x in metrics.step_lines_from_end(console, 1 << 30, chunk=1 << 16,
                                                                                   skips=skips)] == [2, 1]
    assert sum(skips.by_file.values()) >= 4


def _link_out(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def test_dashboard_serves_no_file_from_outside_the_run_folder(run_copy, tmp_path: Path) -> None:
    root = run_copy("crashed")
    outside = tmp_path / "outside"
    (outside / "step_7" / "leaked__1").mkdir(parents=True)
    (outside / "secret.txt").write_text("root:SHADOW-CONTENT:19000")
    trial = root / TRIALS / "step_1" / "word-frequency__933cda1f"
    _link_out(trial / "verifier" / "test-stdout.txt", outside / "secret.txt")
    _link_out(trial / "exception.txt", Path("/proc/self/environ"))
    _link_out(trial / "agent" / "trajectory.json", outside / "secret.txt")
    _link_out(root / TRIALS / "step_9", outside)
    client = _client(root)
    detail = client.get(f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f")
    assert detail.status_code == 200
    body = detail.text
    assert "SHADOW-CONTENT" not in body and "PATH=" not in body
    assert detail.json()["test_stdout"] is None and detail.json()["exception"] is None
    assert "test-stdout.txt" not in detail.json()["files"]
    steps = client.get(f"/api/runs/{EXP}/steps").json()["steps"]
    assert 9 not in [s["step"] for s in steps]
    assert client.get(f"/api/runs/{EXP}/steps/9/trials").json()["trials"] == []
    download = client.get(f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f/trajectory.json")
    assert download.status_code == 404 and "SHADOW" not in download.text


def test_dashboard_masks_what_status_masks(run_copy, monkeypatch) -> None:
    from rlkit.config import secrets

    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(secrets, "_environment", None)  # re-read the environment
    root = run_copy("crashed")
    _append(root / "logs" / f"{EXP}.jsonl", json.dumps({"step": 2, "data": {f"x/{SECRET}": 1.0}}) + "\n")
    summary = root / TRIALS / "step_1" / "summary.json"
    data = json.loads(summary.read_text())
    data["outcomes"][f"odd-{SECRET}"] = 1
    summary.write_text(json.dumps(data))
    trial = root / TRIALS / "step_1" / "word-frequency__933cda1f"
    (trial / "verifier" / "test-stdout.txt").write_text(f"token {SECRET}\x1b]0;title\x07\n")
    client = _client(root)
    for url in (f"/api/runs/{EXP}/metrics", f"/api/runs/{EXP}/steps", f"/api/runs/{EXP}/status",
                f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f",
                f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f/trajectory.json"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert SECRET not in response.text and "\x1b" not in response.text, url
    assert "****" in client.get(f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f").json()["test_stdout"]


def test_agent_text_nested_deep_renders_as_text() -> None:
    deep = "{" + '"a":' * 1 + "[" * 100_000 + "]" * 100_000 + "}"
    blocks = trajectory.render_message(deep)
    assert blocks and blocks[0]["kind"] in ("text", "note", "field")


def test_one_bad_run_does_not_break_the_listing_of_others(run_copy) -> None:
    root = run_copy("crashed")
    healthy = Path(__file__).parent / "fixtures" / "healthy"
    for f in (healthy / "logs").iterdir():
        shutil.copy(f, root / "logs" / f.name)
    with (root / "logs" / f"{EXP}.jsonl").open("a") as f:
        f.write('{"step": 1e999}\n{"step": ' + "9" * 5000 + "}\n" + "[" * 100_000 + "\n")
    os.mkfifo(root / "logs" / f"{EXP}_attempts.jsonl")
    runs = _client(root).get("/api/runs")
    assert runs.status_code == 200
    assert {r["exp"] for r in runs.json()["runs"]} == {EXP, "fx-healthy"}


def test_a_symlink_loop_where_a_trial_file_should_be_is_a_404_not_a_500(run_copy) -> None:
    """Found by the fuzz: Path.resolve() raises RuntimeError on a loop."""
    root = run_copy("crashed")
    trial = root / TRIAL_DIR
    (trial / "agent" / "trajectory.json").unlink()
    (trial / "agent" / "trajectory.json").symlink_to(trial / "agent" / "trajectory.json")
    client = _client(root)
    response = client.get(f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f/trajectory.json")
    assert response.status_code == 404
    assert client.get(f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f").status_code == 200
