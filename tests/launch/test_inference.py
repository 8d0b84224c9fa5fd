"""Inference bring-up without vLLM: config mapping, the proxy's command line, start-up errors,
signal handling and the weight-sync decisions (with stand-ins for the servers)."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import psutil
import pytest

from rlkit.cli.proxy import _parser as proxy_cli
from rlkit.config.schema import RunConfig
from rlkit.errors import LaunchError
from rlkit.launch import inference as inference_mod
from rlkit.launch.inference import Inference, InferenceConfig, _sigterm_raises, inference
from rlkit.launch.proxy_process import serve_command
from rlkit.launch.vllm import startup_error
from rlkit.launch.weight_sync import LogprobProbe, ReloadTimings, WeightSyncReport, logprob_diff
from rlkit.proxy.core import ProxyConfig


def _config(tmp_path: Path, **extra: object) -> InferenceConfig:
    values: dict[str, object] = {"model_path": str(tmp_path / "model"), "exp_name": "t", "log_dir": tmp_path / "logs",
                                 "max_model_len": 4096, "tool_call_parser": "qwen3_coder",
                                 "scratch_dir": tmp_path / "scratch"}
    return InferenceConfig(**{**values, **extra})


def test_from_run_config_resolves_paths_and_clamps_the_window(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 10000}')
    cfg = RunConfig(MODEL_PATH="m", EXP_NAME="exp1", OUTPUT_DIR="out", MAX_PROMPT=4096, MAX_RESP=8192, PROXY_PORT=8100)
    ic = InferenceConfig.from_run_config(cfg, root=tmp_path, proxy_port=0)
    assert ic.model_path == str(model)
    assert ic.log_dir == tmp_path / "out" / "logs"
    assert ic.max_model_len == 10000  # MAX_PROMPT + MAX_RESP is more than the model's window
    assert ic.tool_call_parser == "qwen3_coder"
    assert ic.max_response_tokens_per_session == 8192
    assert ic.proxy_port == 0  # the override wins over PROXY_PORT
    assert InferenceConfig.from_run_config(cfg, root=tmp_path).proxy_port == 8100
    assert ic.served_model_name == "policy" and ic.dev_mode and not ic.proxy_in_process


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra"):
        _config(tmp_path, max_model_length=1)


def test_proxy_command_is_what_rlkit_proxy_serve_reads() -> None:
    config = ProxyConfig(model_path="/m", upstreams=["http://127.0.0.1:1", "http://127.0.0.1:2"], port=0,
                         served_model_name="policy", max_model_len=5000, max_calls_per_session=7,
                         max_response_tokens_per_session=900, max_response_tokens=64,
                         default_sampling={"temperature": 0.5})
    cmd = serve_command(config, python="py")
    assert cmd[:5] == ["py", "-m", "rlkit.cli.main", "proxy", "serve"]
    args = proxy_cli().parse_args(cmd[4:])
    assert (args.model_path, args.upstream, args.port, args.served_model_name) == (
        "/m", ["http://127.0.0.1:1", "http://127.0.0.1:2"], 0, "policy")
    assert (args.max_model_len, args.max_calls_per_session, args.max_response_tokens_per_session,
            args.max_response_tokens, args.sampling) == (5000, 7, 900, 64, '{"temperature": 0.5}')


def test_the_proxy_imports_the_anthropic_adapter_at_start_only_for_an_anthropic_scaffold(tmp_path: Path) -> None:
    """litellm's import is 3-4 s of CPU in every proxy start; only AGENT_API=anthropic (Claude Code) needs it."""
    from rlkit.config.schema import AgentApi
    from rlkit.launch.verl_overrides import agent_loop_settings

    model = tmp_path / "m"
    model.mkdir()
    for api, warm in ((AgentApi.OPENAI, False), (AgentApi.ANTHROPIC, True)):
        cfg = RunConfig(MODEL_PATH="m", EXP_NAME="e", OUTPUT_DIR="out", AGENT_API=api)
        ic = InferenceConfig.from_run_config(cfg, root=tmp_path)
        assert ic.warm_anthropic is warm
        config = Inference(ic)._proxy_config("http://127.0.0.1:1")
        assert config.warm_anthropic is warm
        assert proxy_cli().parse_args(serve_command(config)[4:]).warm_anthropic is warm
        assert agent_loop_settings(cfg, trials_root=tmp_path, proxy_host="127.0.0.1")["proxy"]["warm_anthropic"] is warm


def test_vllm_runs_in_dev_mode_and_new_weights_keep_the_tokenizer(tmp_path: Path) -> None:
    inf = Inference(_config(tmp_path, vllm_extra_args=["--seed", "1"]))
    first = inf.vllm_config(inf.config.model_path, None)
    assert first.env == {"VLLM_SERVER_DEV_MODE": "1"}
    assert first.served_model_name == "policy" and first.extra_args == ["--seed", "1"]
    assert first.log_dir == tmp_path / "logs" and first.scratch_dir == tmp_path / "scratch"
    synced = inf.vllm_config("/ckpt/huggingface", 1234)
    assert synced.extra_args == ["--seed", "1", "--tokenizer", inf.config.model_path]
    assert synced.port == 1234
    assert Inference(_config(tmp_path, dev_mode=False)).vllm_config("/m", None).env == {}
    assert "--worker-extension-cls" not in first.extra_args  # the tiny policy is untied
    inf.close()


def test_tied_embeddings_reload_through_the_worker_extension(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"tie_word_embeddings": true}')
    config = Inference(_config(tmp_path)).vllm_config(str(model), None)
    at = config.extra_args.index("--worker-extension-cls")
    assert config.extra_args[at + 1] == "rlkit_vllm_ext.RlkitWorkerExtension"
    # vLLM's own venv imports the extension from its folder alone (a folder holding rlkit's
    # launch/vllm.py would shadow the vllm package).
    folder = Path(config.env["PYTHONPATH"])
    assert (folder / "rlkit_vllm_ext.py").is_file() and not (folder / "vllm.py").exists()


def test_report_metrics_and_probe_arithmetic() -> None:
    assert logprob_diff([-1.0, -2.0], [-1.5, -2.0]) == (0.5, 0.25)
    with pytest.raises(ValueError):
        logprob_diff([-1.0], [])
    with pytest.raises(ValueError, match="trainer logprobs"):
        LogprobProbe([1], [2, 3], [-1.0])
    report = WeightSyncReport(method="restart", weights_path="/w", seconds=3.0, max_abs_diff=0.1, mean_abs_diff=0.01)
    assert report.metrics() == {"weight_sync/seconds": 3.0, "weight_sync/restarted": 1.0,
                                "weight_sync/logprob_diff_max": 0.1, "weight_sync/logprob_diff_mean": 0.01}
    assert "weight_sync/logprob_diff_max" not in WeightSyncReport(method="reload", weights_path="/w",
                                                                  seconds=0.1).metrics()


def test_startup_error_quotes_the_logs_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    err = startup_error("it died", log)
    assert str(log) in str(err) and "  | line 99" in str(err) and "line 50" not in str(err)
    assert err.fields["log_tail"].endswith("line 99")
    assert "(empty)" in str(startup_error("it died", tmp_path / "missing.log"))


# A vLLM stand-in that prints a few lines, starts an engine-like grandchild and dies.
DYING_VLLM = """#!/bin/sh
echo "INFO starting the api server"
echo "ERROR ValueError: the model is broken in a way only this line explains"
sleep 600 &
echo $! > "$STANDIN_PIDFILE"
exit 3
"""


def test_vllm_dying_at_start_raises_with_its_last_lines_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "python"
    script.write_text(DYING_VLLM)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("STANDIN_PIDFILE", str(tmp_path / "pid"))
    with pytest.raises(LaunchError) as info, inference(_config(tmp_path, vllm_python=str(script))):
        pytest.fail("inference came up although vLLM died")
    message = str(info.value)
    assert "exited with code 3" in message and str(tmp_path / "logs" / "t_vllm_server.log") in message
    assert "only this line explains" in message
    grandchild = int((tmp_path / "pid").read_text())
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
    assert psutil.Process().children(recursive=True) == []


def test_sigterm_unwinds_inside_and_the_default_comes_back() -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(SystemExit) as info, _sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.5)  # the handler runs here at the latest
    assert info.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class _StandInServer:
    port = 1
    base_url = "http://127.0.0.1:1"

    def stop(self) -> None:
        pass


def _sync_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, reload_fails: bool, diffs: list[float],
               max_probe_diff: float | None = 0.1) -> tuple[Inference, list[str]]:
    inf = Inference(_config(tmp_path, max_probe_diff=max_probe_diff))
    inf.vllm = _StandInServer()  # type: ignore[assignment]
    restarts: list[str] = []

    def reload(url: str, path: str, method: str) -> ReloadTimings:
        if reload_fails:
            raise LaunchError("reload_weights failed")
        return ReloadTimings(paused=True, reload_s=0.01, reset_prefix_cache_s=0.001)

    monkeypatch.setattr(inference_mod, "reload_in_place", reload)
    monkeypatch.setattr(inf, "restart_vllm", restarts.append)
    answers = iter(diffs)
    monkeypatch.setattr(inf, "probe_logprobs", lambda prompt, target: [next(answers)])
    return inf, restarts


PROBE = LogprobProbe(prompt_ids=[1, 2], target_ids=[3], trainer_logprobs=[0.0])


def test_sync_reloads_in_place_when_the_probe_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=False, diffs=[-0.001])
    report = inf.sync_weights(tmp_path / "w", probe=PROBE)
    assert (report.method, report.paused, report.max_abs_diff, restarts) == ("reload", True, 0.001, [])
    assert inf.weights_path == str((tmp_path / "w").resolve())


def test_failed_reload_restarts_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=True, diffs=[0.0])
    report = inf.sync_weights(tmp_path / "w", probe=PROBE)
    assert report.method == "restart" and report.reload_error == "reload_weights failed"
    assert restarts == [str((tmp_path / "w").resolve())] and report.restart_s is not None


def test_reload_far_from_the_trainer_restarts_once_then_stands(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # reload: 0.5 off -> restart: still 0.5 off (the trainer's numerics) -> next reload is kept
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=False, diffs=[0.5, 0.5, 0.5])
    first = inf.sync_weights(tmp_path / "w", probe=PROBE)
    assert first.method == "restart" and "differ from the trainer's" in (first.reload_error or "")
    second = inf.sync_weights(tmp_path / "w", probe=PROBE)
    assert second.method == "reload" and second.max_abs_diff == 0.5 and len(restarts) == 1
    assert second.verified is False and "differ from the trainer's" in (second.unverified_reason or "")


def test_every_sync_is_still_judged_after_a_restart_did_not_help(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart that did not help stops further restarts, not the checking: a later sync that
    verifies clears it, and the one after that restarts again when its reload is stale."""
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=False, diffs=[0.5, 0.5, 0.0, 0.5, 0.0])
    assert inf.sync_weights(tmp_path / "w", probe=PROBE).verified is False  # reload 0.5, restart 0.5
    assert inf.sync_weights(tmp_path / "w", probe=PROBE).verified is True  # 0.0: cleared
    last = inf.sync_weights(tmp_path / "w", probe=PROBE)  # 0.5 -> restart -> 0.0
    assert (last.method, last.verified, len(restarts)) == ("restart", True, 2)


def test_a_reload_that_did_nothing_is_caught_under_the_absolute_limit(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An update moved the probe by 0.05 nats (under max_probe_diff 0.1): a server still serving the old
    weights is 0.05 from the new logprobs, which the absolute limit alone let through."""
    probe = LogprobProbe(prompt_ids=[1, 2], target_ids=[3], trainer_logprobs=[-1.0], before_logprobs=[-1.05])
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=False, diffs=[-1.05, -1.0])
    report = inf.sync_weights(tmp_path / "w", probe=probe)
    assert report.method == "restart" and "not much closer" in (report.reload_error or "")
    assert (report.verified, report.decisive, report.probe_moved, len(restarts)) == (True, True, pytest.approx(0.05), 1)
    assert report.metrics()["weight_sync/verified"] == 1.0


def test_an_update_too_small_to_see_is_reported_indecisive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = LogprobProbe(prompt_ids=[1, 2], target_ids=[3], trainer_logprobs=[-1.0], before_logprobs=[-1.0 + 1e-7])
    inf, restarts = _sync_with(tmp_path, monkeypatch, reload_fails=False, diffs=[-1.0 + 1e-7])
    report = inf.sync_weights(tmp_path / "w", probe=probe)
    assert (report.method, report.verified, report.decisive, restarts) == ("reload", True, False, [])
    assert report.metrics()["weight_sync/decisive"] == 0.0

