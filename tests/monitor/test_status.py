from __future__ import annotations

import json
from pathlib import Path

from rlkit.cli.main import main as rlkit
from rlkit.monitor import firststep
from rlkit.monitor.run import locate
from rlkit.monitor.status import collect, render

REPO = Path(__file__).resolve().parents[2]


def _config(root: Path, exp: str, **keys: str) -> Path:
    """The embedded config as the recorded run had it, writing to `root`."""
    text = (REPO / "examples" / "configs" / "embedded.env").read_text()
    extra = {"EXP_NAME": exp, "OUTPUT_DIR": str(root), "TOTAL_STEPS": "2", "TRAIN_BSZ": "1", "MINI_BSZ": "1",
             "MODEL_PATH": str(root), **keys}
    path = root / f"{exp}.env"
    path.write_text(text + "\n" + "\n".join(f"{k}={v}" for k, v in extra.items()) + "\n")
    return path


def test_parser_mismatch_names_the_parser_and_the_dominant_outcome(run_copy) -> None:
    root = run_copy("parser")
    status = collect(locate(str(_config(root, "fx-parser", TOOL_CALL_PARSER="hermes", SCAFFOLD="oc",
                                        MAX_PROMPT="10240", MAX_RESP="1024"))))
    early, reward, step_time = status.numbers
    assert early.mark == firststep.BAD and "TOOL_CALL_PARSER=hermes" in early.verdict
    assert reward.mark == firststep.BAD and "parse_error" in reward.verdict and "mean 0.000" in reward.value
    assert "rollout" in step_time.value
    assert status.live.state == "finished" and status.last_step == 2


def test_healthy_run_status(run_copy) -> None:
    root = run_copy("healthy")
    status = collect(locate(str(_config(root, "fx-healthy"))))
    early, reward, step_time = status.numbers
    assert early.mark == firststep.OK and "0 parse_error" in early.value
    assert reward.mark != firststep.BAD and "mean 1.000, pass rate 100%" in reward.value  # both trials of step 1 passed
    assert step_time.mark == firststep.OK and "timing_s/gen" in step_time.value
    text = render(status)
    assert "step     2/2" in text and "finished" in text
    assert text.index("1. ended early") < text.index("2. reward") < text.index("3. step time")


def test_crashed_run_status(run_copy) -> None:
    root = run_copy("crashed")
    status = collect(locate("fx-crash", root))
    assert not status.live.alive and status.live.state == "stopped"
    assert status.last_step == 1 and status.interrupted_step == 2
    assert status.reaper and "died" in status.reaper
    text = render(status)
    assert "stopped during step 2" in text and "first step (step 1)" in text
    assert [n.name for n in status.numbers] == ["ended early / parse failures", "reward", "step time"]


def test_verl_run_status_from_its_console_log() -> None:
    status = collect(locate("verl-run", REPO / "tests" / "monitor" / "fixtures" / "verl"))
    assert status.last_step == 3 and status.first_step == 1
    _, reward, step_time = status.numbers
    assert reward.mark == firststep.OK and "0.125" in reward.value
    assert step_time.mark == firststep.OK and "77%" in step_time.value


def test_cli_status_text_and_json(run_copy, capsys) -> None:
    root = run_copy("crashed")
    assert rlkit(["status", "fx-crash", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    for line in ("1. ended early / parse failures", "2. reward", "3. step time"):
        assert line in out
    assert rlkit(["status", "fx-crash", "--root", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step"] == 1 and len(data["first_step_numbers"]) == 3 and data["alive"] is False


def test_cli_status_follow_stops_on_a_finished_run(run_copy, capsys) -> None:
    root = run_copy("crashed")
    assert rlkit(["status", "fx-crash", "--root", str(root), "--follow", "--interval", "0.5"]) == 0
    assert "3. step time" in capsys.readouterr().out


def test_cli_status_unknown_run(tmp_path: Path, capsys) -> None:
    assert rlkit(["status", "nope", "--root", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_status_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = ("import sys; from rlkit.cli.main import main; main(['status', 'verl-run', '--root', "
            f"{str(REPO / 'tests/monitor/fixtures/verl')!r}]); "
            "print(sorted(m for m in ('torch', 'ray', 'verl', 'harbor', 'vllm', 'transformers', 'fastapi') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_status_without_a_target_picks_the_latest_run(run_copy, monkeypatch, capsys) -> None:
    monkeypatch.chdir(run_copy("crashed"))
    assert rlkit(["status"]) == 0
    assert "embedded/fx-crash" in capsys.readouterr().out


def test_verdicts_for_a_saturated_and_an_infrastructure_bound_step() -> None:
    outcomes = dict.fromkeys(("passed", "failed_tests", "sandbox_error"), 0)
    easy = firststep.reward({"outcomes": {**outcomes, "passed": 4}, "trials": 4}, {"critic/rewards/mean": 1.0,
                                                                                  "rollout/pass_rate": 1.0})
    assert easy.mark == firststep.WARN and "too easy" in easy.verdict
    broken = firststep.reward({"outcomes": {**outcomes, "sandbox_error": 4}, "trials": 4},
                              {"critic/rewards/mean": 0.0})
    assert broken.mark == firststep.BAD and "sandbox_error" in broken.verdict and "docker" in broken.verdict
    slow_update = firststep.step_time({"timing_s/step": 100.0, "timing_s/gen": 20.0})
    assert slow_update.mark == firststep.WARN and "20%" in slow_update.value


def test_process_roles_by_command_line() -> None:
    from rlkit.monitor.run import _role

    assert _role("/x/.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model m --port 1") == "vllm"
    assert _role("/x/.venv/bin/python -m rlkit.cli.main proxy serve --model-path m --upstream http://h:1") == "proxy"
    assert _role("/x/ray/core/src/ray/raylet/raylet --node-ip-address=1") == "ray"
    assert _role("bash") is None


def test_a_run_not_started_yet(tmp_path: Path) -> None:
    text = render(collect(locate(str(_config(tmp_path, "fx-new")))))
    assert "not started" in text and "step     —/2" in text


def test_a_validation_before_training_is_not_the_first_step(run_copy) -> None:
    """verl's val_before_train (and the embedded trainer's) logs `step:0` with only val/ metrics."""
    root = run_copy("healthy")
    val_only = {"val-core/rlkit_tasks/reward/mean@8": 0.5, "val/pass@1": 0.5, "timing_s/testing": 300.0}
    for name, line in (("fx-healthy.jsonl", json.dumps({"step": 0, "data": val_only})),
                       ("fx-healthy.log", " - ".join(["step:0", *(f"{k}:{v}" for k, v in val_only.items())]))):
        path = root / "logs" / name
        path.write_text(line + "\n" + path.read_text())
    status = collect(locate(str(_config(root, "fx-healthy"))))
    assert status.first_step == 1
    assert all(n.value != "n/a" for n in status.numbers)
