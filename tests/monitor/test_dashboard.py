from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlkit.monitor.dashboard import create_app

REMOTE = ("203.0.113.9", 50000)


@pytest.fixture
def crashed(run_copy) -> Path:
    return run_copy("crashed")


def local(root: Path, **kw) -> TestClient:
    return TestClient(create_app(root, **kw), client=("127.0.0.1", 50000), base_url="http://127.0.0.1:8090")


def test_runs_and_offset_based_metrics(crashed: Path) -> None:
    client = local(crashed)
    runs = client.get("/api/runs").json()["runs"]
    assert [r["exp"] for r in runs] == ["fx-crash"] and runs[0]["project"] == "embedded"
    first = client.get("/api/runs/fx-crash/metrics?offset=0").json()
    assert first["steps"] == [1] and "critic/rewards/mean" in first["columns"] and first["source"] == "fx-crash.jsonl"
    again = client.get(f"/api/runs/fx-crash/metrics?offset={first['offset']}").json()
    assert again["steps"] == [] and again["offset"] == first["offset"]
    with (crashed / "logs" / "fx-crash.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "data": {"critic/rewards/mean": 0.5}}) + "\n")
    new = client.get(f"/api/runs/fx-crash/metrics?offset={first['offset']}").json()
    assert new["steps"] == [2] and new["columns"] == {"critic/rewards/mean": [0.5]}


def test_vllm_status_and_steps(crashed: Path) -> None:
    client = local(crashed)
    assert client.get("/api/runs/fx-crash/vllm").json()["rows"]
    status = client.get("/api/runs/fx-crash/status").json()
    assert len(status["first_step_numbers"]) == 3 and status["state"] == "stopped"
    steps = client.get("/api/runs/fx-crash/steps").json()["steps"]
    assert [s["step"] for s in steps] == [1, 2] and steps[0]["trials"] == 2 and "sessions" not in steps[0]


def test_trials_and_a_trajectory(crashed: Path) -> None:
    client = local(crashed)
    trials = client.get("/api/runs/fx-crash/steps/1/trials").json()["trials"]
    assert len(trials) == 2 and {t["outcome"] for t in trials} == {"response_budget"}
    session = trials[0]["session"]
    detail = client.get(f"/api/runs/fx-crash/steps/1/trials/{session}").json()
    assert detail["steps"] and detail["test_stdout"] and detail["row"]["session"] == session
    assert all("prompt_token_ids" not in (s.get("metrics") or {}) for s in detail["steps"])
    raw = client.get(f"/api/runs/fx-crash/steps/1/trials/{session}/trajectory.json")
    assert raw.status_code == 200 and "attachment" in raw.headers["content-disposition"]
    assert raw.json()["session_id"] == session


@pytest.mark.parametrize("path", ["/api/runs/fx-crash/steps/1/trials/..%2F..%2F..%2Fetc",
                                  "/api/runs/fx-crash/steps/1/trials/../../../../etc/passwd",
                                  "/api/runs/..%2F..%2Fetc/steps",
                                  "/api/runs/fx-crash/steps/1/trials/..",
                                  "/api/runs/..",
                                  "/api/runs/fx-crash/steps/1/trials/%2E%2E/trajectory.json",
                                  "/static/..%2F..%2Fdashboard.py"])
def test_paths_never_escape_the_run_folders(crashed: Path, path: str) -> None:
    response = local(crashed).get(path)
    assert response.status_code in {400, 404}, (path, response.status_code)
    assert "root:" not in response.text and "import" not in response.text


def test_a_remote_request_without_a_token_is_refused(crashed: Path) -> None:
    remote = TestClient(create_app(crashed), client=REMOTE)
    assert remote.get("/api/runs").status_code == 403
    assert remote.get("/").status_code == 403
    rebinding = local(crashed).get("/api/runs", headers={"host": "attacker.example:8090"})
    assert rebinding.status_code == 403


def test_with_a_token_every_request_carries_it(crashed: Path) -> None:
    app = create_app(crashed, token="s3cret-token")
    for client in (TestClient(app, client=REMOTE), TestClient(app, client=("127.0.0.1", 1))):
        assert client.get("/api/runs").status_code == 401
        assert client.get("/api/runs?token=wrong").status_code == 401
        assert client.get("/api/runs", headers={"authorization": "Bearer s3cret-token"}).status_code == 200
    browser = TestClient(app, client=REMOTE)
    landing = browser.get("/?token=s3cret-token", follow_redirects=False)
    assert landing.status_code == 303 and "rlkit_dashboard_token" in landing.headers["set-cookie"]
    assert browser.get("/api/runs").status_code == 200  # the cookie


def test_page_and_vendored_uplot(crashed: Path) -> None:
    client = local(crashed)
    page = client.get("/")
    assert page.status_code == 200 and "uPlot.iife.min.js" in page.text
    js = client.get("/static/vendor/uPlot.iife.min.js")
    assert js.status_code == 200 and "uPlot" in js.text[:2000]
    assert (Path(__file__).resolve().parents[2] / "rlkit/monitor/static/vendor/VERSION").read_text().startswith("uplot@")


def test_dashboard_cli_refuses_a_public_bind_without_a_token(crashed: Path, capsys) -> None:
    from rlkit.cli.main import main as rlkit

    assert rlkit(["dashboard", str(crashed), "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "token" in capsys.readouterr().err
