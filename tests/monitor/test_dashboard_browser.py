"""The dashboard in a real browser: Debian's chromium, headless, driven by playwright (no browser download).

Loads the page on a recorded run, waits for the uPlot curves to be drawn, opens the trajectory
browser down to one trial (ATIF steps and test output), and keeps screenshots under
$RLKIT_ARTIFACTS (default tests/.artifacts/) for CI.
"""

from __future__ import annotations

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


@pytest.fixture
def served(run_copy):
    import uvicorn

    from rlkit.monitor.dashboard import create_app

    root = run_copy("healthy")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


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
            page.wait_for_selector("#browser table.list tr.row")
            page.click("#browser table.list tr.row[data-key='1']")  # step 1
            page.wait_for_selector("#crumbs >> text=step")
            page.click("#browser table.list tr.row >> nth=0")  # a trial
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
