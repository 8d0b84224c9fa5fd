"""The collapse named on the trainer's own console while it runs (rlkit.monitor.collapse_watch), and kept in
logs/<exp>.log: fed the crafted collapsing and healthy runs of tests/monitor/fixtures/collapsing.py."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from rlkit.config.paths import RunPaths
from rlkit.monitor.collapse_watch import CollapseWatch
from tests.monitor.fixtures import collapsing


def test_a_collapse_is_named_once_and_again_only_after_it_cleared(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "embedded", "fx")
    named: list = []
    watch = CollapseWatch(paths, named.append)
    collapsing.write_run(tmp_path, "fx", "healthy")
    assert watch.check() is None and named == []
    collapsing.write_run(tmp_path, "fx", "entropy_rise")
    found = watch.check()
    assert found is not None and found.kind == "entropy_rise" and named == [found]
    with paths.console_log.open("a") as out:  # the next step's line: the same collapse, not named again
        out.write("step:17 - critic/score/mean:0.0\n")
    assert watch.check() is None and len(named) == 1
    collapsing.write_run(tmp_path, "fx", "healthy")
    assert watch.check() is None  # cleared
    collapsing.write_run(tmp_path, "fx", "agent_error")
    again = watch.check()
    assert again is not None and again.outcome == "agent_error" and len(named) == 2


def test_the_watch_polls_on_its_own_thread_and_reads_the_last_steps_on_exit(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "embedded", "fx")
    named: list = []
    with CollapseWatch(paths, named.append, poll_s=0.05):
        collapsing.write_run(tmp_path, "fx", "entropy_rise")
    assert [c.kind for c in named] == ["entropy_rise"]


@pytest.mark.parametrize("kind, named", [("entropy_rise", True), ("healthy", False)])
def test_the_trainer_console_and_log_name_a_collapse_with_a_stand_in_trainer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str,
        named: bool) -> None:
    """rlkit.api's run_trainer around a stand-in trainer (a function that writes a crafted run's files, as a
    trainer's steps would): the collapse lines on stdout and as `[rlkit] ...` lines in logs/<exp>.log."""
    from rlkit.api import training

    def stand_in_trainer(resolved, console=None) -> int:
        collapsing.write_run(tmp_path, "fx", kind)
        return 0

    module = types.ModuleType("stand_in_trainer_mod")
    module.train = stand_in_trainer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stand_in_trainer_mod", module)
    monkeypatch.setitem(training.RUNNERS, "local", "stand_in_trainer_mod:train")
    paths = RunPaths(tmp_path, "embedded", "fx")
    resolved = types.SimpleNamespace(config=types.SimpleNamespace(TRAINER=types.SimpleNamespace(value="local")),
                                     run_paths=lambda: paths)
    training.run_trainer(resolved)  # type: ignore[arg-type]
    out, log = capsys.readouterr().out, paths.console_log.read_text() if paths.console_log.exists() else ""
    if named:
        assert "✗ collapse: reward falls while entropy rises" in out
        assert "entropy 0.133 → 0.485" in out and "try: lower the learning rate" in out
        assert "[rlkit] ✗ collapse: reward falls while entropy rises" in log
        assert "[rlkit]   try: lower the learning rate" in log
    else:
        assert "collapse" not in out and "[rlkit] ✗" not in log


def test_a_watch_that_fails_never_fails_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.monitor import collapse_watch

    def broken(_paths):
        raise KeyError("a file the rule did not expect")

    monkeypatch.setattr(collapse_watch, "collapse_of", broken)
    collapsing.write_run(tmp_path, "fx", "entropy_rise")
    with CollapseWatch(RunPaths(tmp_path, "embedded", "fx"), lambda _: None, poll_s=0.01) as watch:
        pass
    assert watch.named == []


def _replay(src: Path, dest: Path) -> list[tuple[int, object]]:
    """A recorded run's metric lines and step summaries written into `dest` one step at a time, as its trainer
    wrote them; the watch looks after each step. (step, finding) for each one it named."""
    import shutil

    exp = "rl-x3-s0"
    paths = RunPaths(dest, "embedded", exp)
    paths.logs.mkdir(parents=True)
    named: list = []
    watch = CollapseWatch(paths, named.append)
    found_at: list[tuple[int, object]] = []
    for line in (src / "logs" / f"{exp}.jsonl").read_text().splitlines():
        step = json.loads(line).get("step")
        summary = src / "harbor_trials" / "embedded" / exp / f"step_{step}" / "summary.json"
        if summary.is_file():
            (paths.trials / f"step_{step}").mkdir(parents=True)
            shutil.copy(summary, paths.trials / f"step_{step}" / "summary.json")
        with paths.jsonl.open("a") as out:
            out.write(line + "\n")
        if step and watch.check() is not None:
            found_at.append((step, named[-1]))
    return found_at


def test_the_real_lr_2_7e_3_run_is_named_at_step_8_and_the_real_lr_9e_4_run_never(tmp_path: Path) -> None:
    """Recorded runs of the embedded default (tests/monitor/fixtures/README.md): LR 2.7e-3 (9x the default), whose
    train pass@1 fell 0.321 -> 0.000 as agent_error took over, and LR 9e-4 (3x) for 16 steps, which gained."""
    fixtures = Path(__file__).parent / "fixtures"
    found = _replay(fixtures / "collapsing_lr2.7e-3", tmp_path / "x9")
    assert [step for step, _ in found] == [8]
    collapse = found[0][1]
    assert collapse.outcome == "agent_error" and (collapse.before, collapse.after) == pytest.approx((0.1875, 0.0625))
    assert _replay(fixtures / "gaining_lr9e-4", tmp_path / "x3") == []
