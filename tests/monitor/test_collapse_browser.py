"""The dashboard shows a collapse as a banner on the run, in a real browser (headless chromium, as
test_dashboard_browser.py): on a crafted collapsing run folder, and not on a healthy one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monitor.fixtures import collapsing
from tests.monitor.test_dashboard_browser import ARTIFACTS, CHROMIUM, _browser, _serve

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")


def test_the_dashboard_shows_the_collapse_banner(tmp_path: Path) -> None:
    root = tmp_path / "out"
    collapsing.write_run(root, "fx-fine", "healthy")
    collapsing.write_run(root, "fx-collapse", "entropy_rise")  # the newer: the page opens on it
    with _serve(root) as url, _browser(tmp_path) as context:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/", wait_until="load")
        page.wait_for_selector("#collapse", timeout=30_000)
        banner = page.inner_text("#collapse")
        assert "collapse: reward falls while entropy rises" in banner
        assert "4-step mean reward 0.56 → 0.19 (steps 6 → 16); entropy 0.133 → 0.485" in banner
        assert "LR=0.00033 or less" in banner and "KL_LOSS_COEF" in banner
        assert page.get_attribute("#collapse", "role") == "alert"
        page.wait_for_function("Number(document.body.dataset.chartsDrawn || 0) >= 3", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard_collapse.png"), full_page=True)

        healthy = context.new_page()
        healthy.goto(url + "/?run=fx-fine", wait_until="load")
        healthy.wait_for_selector("#first-step table", timeout=30_000)
        assert healthy.locator("#collapse").count() == 0
        assert not errors, errors
