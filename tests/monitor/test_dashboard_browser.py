"""The dashboard in a real browser: Debian's chromium, headless, driven by playwright (no browser download).

Loads the page on a recorded run, waits for the uPlot curves to be drawn, opens the trajectory
browser down to one trial (ATIF steps and test output), and keeps screenshots under
$RLKIT_ARTIFACTS (default tests/.artifacts/) for CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("RLKIT_ARTIFACTS") or Path(__file__).resolve().parents[1] / ".artifacts")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serve(root: Path):
    import uvicorn

    from rlkit.monitor.dashboard import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def served(run_copy):
    with _serve(run_copy("healthy")) as url:
        yield url


@contextlib.contextmanager
def _browser(tmp_path: Path):
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                       headless=True, args=FLAGS, viewport={"width": 1400,
                                                                                            "height": 1000})
        try:
            yield context
        finally:
            context.close()


def test_the_trajectory_view_of_a_failed_trial(run_copy, tmp_path: Path) -> None:
    """A run stopped by SIGINT and resumed (fixture `stopped`): the run list marks it finished at 3/3 of its
    second attempt, and a failed trial reads as the instruction, the turns (the keystrokes the agent typed,
    the terminal output that came back) and the tests' output."""
    root = run_copy("stopped")
    trials_root = root / "harbor_trials" / "i27" / "fx-stopped"
    failed = [(int(d.name[5:]), s["session"]) for d in sorted(trials_root.glob("step_*")) if d.name[5:].isdigit()
              for s in json.loads((d / "summary.json").read_text())["sessions"]
              if s["reward"] < 1 and (d / s["session"] / "agent" / "trajectory.json").is_file()]
    assert failed, "the fixture holds a failed trial"
    step, session = failed[0]
    with _serve(root) as url, _browser(tmp_path) as context:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/", wait_until="load")
        page.wait_for_selector("#run-state")
        assert "finished, step 3/3, attempt 2" in page.inner_text("#run-state")
        assert page.locator("label.run[data-state='finished']").count() == 1
        page.goto(f"{url}/#/trials/fx-stopped/{step}/{session}", wait_until="load")
        page.wait_for_function("document.body.dataset.trialShown", timeout=30_000)
        instruction = page.inner_text("#instruction")
        assert len(instruction) > 40 and "(not recorded)" not in instruction
        assert page.locator(".turn").count() >= 1
        sent = page.locator(".turn pre.sent").all_inner_texts()
        assert sent and not any("\\n" in text for text in sent)  # rendered, not escaped JSON
        came_back = page.locator(".turn pre.observation:not(.empty)").all_inner_texts()
        assert any("root@" in text or "$" in text for text in came_back), came_back
        assert page.inner_text("#test-stdout").strip() not in ("", "(none)")
        page.screenshot(path=str(ARTIFACTS / "dashboard_failed_trial.png"), full_page=True)
        assert not errors, errors


def test_dashboard_draws_curves_and_opens_a_trajectory(served: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                       headless=True, args=FLAGS, viewport={"width": 1400,
                                                                                            "height": 1000})
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(served + "/", wait_until="load")
            page.wait_for_function("Number(document.body.dataset.chartsDrawn || 0) >= 3", timeout=30_000)
            assert page.locator(".uplot canvas").count() >= 3
            page.wait_for_selector("#first-step table")
            assert "ended early" in page.inner_text("#first-step")
            page.screenshot(path=str(ARTIFACTS / "dashboard_curves.png"), full_page=True)

            page.click("#tab-trials")
            page.wait_for_selector("#browser[data-view='steps'] table.list tr.row")
            page.click("#browser table.list tr.row[data-key='1']")  # step 1
            page.wait_for_selector("#crumbs >> text=step")
            # The crumbs change at once; the step's trials replace the steps' table when they come.
            page.click("#browser[data-view='step'] table.list tr.row >> nth=0")  # a trial
            page.wait_for_function("document.body.dataset.trialShown", timeout=30_000)
            assert page.locator(".atif-step").count() >= 1
            assert page.inner_text("#test-stdout").strip()
            assert "#/trials/fx-healthy/" in page.url  # a deep link
            page.screenshot(path=str(ARTIFACTS / "dashboard_trajectory.png"), full_page=True)

            deep = page.url
            fresh = context.new_page()
            fresh.goto(deep, wait_until="load")
            fresh.wait_for_function("document.body.dataset.trialShown", timeout=30_000)
            assert not errors, errors
        finally:
            context.close()


def test_a_late_answer_does_not_paint_over_the_view_the_user_moved_to(served: str, tmp_path: Path) -> None:
    """The steps' list is asked for, the user opens a trial before it comes: when the list's answer
    comes late, the trial stays on screen."""
    import urllib.request

    with urllib.request.urlopen(f"{served}/api/runs/fx-healthy/steps/1/trials", timeout=30) as answer:
        session = json.loads(answer.read())["trials"][0]["session"]
    with _browser(tmp_path) as context:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        held: list = []
        page.route("**/api/runs/fx-healthy/steps", lambda route: held.append(route))  # the steps' list waits until released
        page.goto(served + "/#/trials/fx-healthy", wait_until="load")
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        assert held, "the steps' list was asked for"
        page.evaluate(f"location.hash = '#/trials/fx-healthy/1/{session}'")
        page.wait_for_function("document.body.dataset.trialShown", timeout=30_000)
        with page.expect_response("**/api/runs/fx-healthy/steps"):
            for route in held:
                route.continue_()
        page.unroute("**/api/runs/fx-healthy/steps")
        page.wait_for_timeout(300)  # the late answer's handler has run
        assert page.locator("#trial-head").count() == 1, page.inner_text("#browser")[:500]
        assert page.get_attribute("#browser", "data-view") == "trial"
        assert not errors, errors
