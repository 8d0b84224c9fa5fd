"""Regression tests of issue 25, one per kind the second round found. It went past the run config to
everything rlkit reads because of it (model files, indexes and their metadata, locks, checkpoint
markers, kube configs, chat templates) and to the ways a message can carry a value:

  secrets printed          by a fix hint, a syntax error, a clip, a split list, an escape, a credential name
  tracebacks and hangs     in DRY_RUN (model config.json) and in check / --context (metadata, locks)
  raw terminal escapes     from a file name, config.json, a kube server, a failure reason, a step file, a lock
  absurd values accepted   counts of 2^31-1, 1e308, 1e-320, waits of 0, a prompt beyond the model's window
  silent layer overrides   a template over site.env, a run-only key in site.env, a template key in the run
  OUTPUT_DIR climbing out  with ../

Every command runs in-process as `rlkit` runs it (tests/validate/helpers.py: run_cli), with its streams
cleaned by rlkit.config.display, so what is asserted is what a terminal would get.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from rlkit.validate.findings import Status
from tests.validate.helpers import run_cli, write_index
from tests.validate.test_hostile_configs import fatals, no_crash, warm

SECRET = "wandb-Zq8Xr2Lm5Nv7Tp1Kd4Hs9Wf3"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(autouse=True)
def warm_probe_cache(ws) -> None:
    warm(ws)  # the parser probe's verdict for ws's chat template: no probe subprocess here


def assert_clean(out: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in out, secret
    bad = RAW_CONTROL.search(out)
    assert bad is None, f"raw control character {bad.group(0)!r} in: {out[max(bad.start() - 80, 0):bad.end() + 40]!r}"
    assert "Traceback" not in out and "check crashed" not in out and "did not finish" not in out


def both_modes(ws, cfg: Path, **env: str) -> dict[str, tuple[int, str]]:
    base = {**ws.environ(), **env}
    return {"check": run_cli(["check", str(cfg)], base),
            "dry_run": run_cli(["train", str(cfg)], {**base, "DRY_RUN": "1"})}


def model_copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():  # weights linked (never read); the files rlkit reads copied: no link out of the folder
        if f.suffix in (".safetensors", ".bin"):
            (dst / f.name).symlink_to(f)
        else:
            shutil.copy(f, dst / f.name)
    return dst


def special(path: Path, kind: str) -> Path:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero_link":
        path.symlink_to("/dev/zero")
    return path


# ---- secrets printed ------------------------------------------------------------------------------
SECRET_CASES = {
    "fix hint quotes the line": ({"WANDB_API_KEY": SECRET}, f"EXP_NAME=run {SECRET}\n", "", [SECRET]),
    "syntax error quotes the line": ({"WANDB_API_KEY": SECRET}, f"{SECRET}\n", "", [SECRET]),
    "clipped mid-secret": ({"WANDB_API_KEY": SECRET}, f"{'x' * 50}{SECRET}\n", "", [SECRET, SECRET[:8]]),
    "list split at commas": ({"WANDB_API_KEY": "wandb-Zq8Xr2Lm,5Nv7Tp1Kd4Hs"}, "LOGGER=console,${WANDB_API_KEY}\n",
                             "", ["wandb-Zq8Xr2Lm", "5Nv7Tp1Kd4Hs"]),
    "quote backslash no-break space": ({"WANDB_API_KEY": "wa'nd\\b\u00a0Zq8Xr2Lm5Nv7"},
                                       "TRAIN_BSZ=${WANDB_API_KEY}\nEXP_NAME=${WANDB_API_KEY}\n", "",
                                       ["Zq8Xr2Lm5Nv7"]),
    "lowercase credential key": ({}, "", "wandb_api_key=lower case-Zq8Xr2Lm5Nv7\n", ["Zq8Xr2Lm5Nv7"]),
    "HF_TOKEN line with a syntax error": ({}, "HF_TOKEN=hf_Zq8Xr2Lm5Nv7 x\n", "", ["hf_Zq8Xr2Lm5Nv7"]),
    "credentials of the environment": ({"HF_TOKEN": "hf_Zq8Xr2Lm5Nv7Tp1", "OPENAI_API_KEY": "sk-Zq8Xr2Lm5Nv7Tp1",
                                        "GITHUB_TOKEN": "ghp_Zq8Xr2Lm5Nv7Tp1"},
                                       "EXP_NAME=hf_Zq8Xr2Lm5Nv7Tp1\nHARBOR_AGENT=sk-Zq8Xr2Lm5Nv7Tp1\n",
                                       "REGISTRY=ghp_Zq8Xr2Lm5Nv7Tp1\n",
                                       ["hf_Zq8Xr2Lm5Nv7Tp1", "sk-Zq8Xr2Lm5Nv7Tp1", "ghp_Zq8Xr2Lm5Nv7Tp1"]),
}


@pytest.mark.parametrize("case", sorted(SECRET_CASES))
def test_a_secret_is_never_printed_whatever_message_carries_it(ws, case: str) -> None:
    env, run_extra, site_extra, hidden = SECRET_CASES[case]
    cfg = ws.config()
    cfg.write_text(cfg.read_text() + run_extra)
    ws.site.write_text(ws.site.read_text() + site_extra)
    for mode, (rc, out) in both_modes(ws, cfg, **env).items():
        assert rc in (0, 1, 2), (mode, out)
        assert_clean(out, *hidden)


def test_a_secret_inside_another_key_is_fatal(ws) -> None:
    cfg = ws.config(PROJECT_NAME="p-${WANDB_API_KEY}")
    cfg.write_text(cfg.read_text() + "MODEL_PATH=" + str(ws.model_dir) + "/${WANDB_API_KEY}\n")
    report = ws.preflight(cfg, environ=ws.environ(WANDB_API_KEY=SECRET))
    assert [f.key for f in fatals(report, "secret_spread")] == ["MODEL_PATH"]
    assert [f.key for f in fatals(report, "names")] == ["PROJECT_NAME"]


# ---- tracebacks and hangs in DRY_RUN --------------------------------------------------------------
CONFIG_JSON = {
    "not an object": (b"[1, 2]", "the top level: Input should be a valid dictionary"),
    "a field of the wrong type": (b'{"max_position_embeddings": "4096"}', "max_position_embeddings: Input should be"),
    "an enormous integer": (b'{"max_position_embeddings": ' + b"9" * 5000 + b"}", "integer of 5000 digits"),
    "a window too large": (b'{"max_position_embeddings": 1000000000000}', "less than or equal to 67108864"),
    "a negative window": (b'{"max_position_embeddings": -5}', "greater than or equal to 1"),
    "deeply nested arrays": (b'{"text_config": ' + b"[" * 50_000 + b"}", "nested too deeply"),
    "a wrong nested config": (b'{"text_config": {"num_experts": "many"}}', "text_config.num_experts"),
    "a FIFO": ("fifo", "is a FIFO (named pipe), not a regular file"),
    "a link to an endless device": ("zero_link", "is a character device (a link to one)"),
}


@pytest.mark.parametrize("trainer", ["verl", "local"])
@pytest.mark.parametrize("case", sorted(CONFIG_JSON))
def test_hostile_model_config_is_the_same_fatal_in_dry_run_and_check(ws, tmp_path: Path, case: str,
                                                                     trainer: str) -> None:
    content, needle = CONFIG_JSON[case]
    model = model_copy(ws.model_dir, tmp_path / "model")
    target = model / "config.json"
    if isinstance(content, bytes):
        target.unlink()
        target.write_bytes(content)
    else:
        special(target, content)
    cfg = ws.config(MODEL_PATH=model, TRAINER=trainer)
    lines = {}
    for mode, (rc, out) in both_modes(ws, cfg).items():
        assert rc == 1, (mode, out)
        assert_clean(out)
        (line,) = [x for x in out.splitlines() if x.strip().startswith("✗ FATAL model_dir")]
        assert needle in line and str(target) in line, line
        assert "--max-model-len -5" not in out and "Launch plan" not in out and "# TRAINER=local" not in out
        lines[mode] = line
    assert lines["check"] == lines["dry_run"]  # DRY_RUN agrees with check


# ---- crashed checks and hangs in check -------------------------------------------------------------
def _index_with_metadata(path: Path, value: bytes) -> Path:
    import pyarrow.parquet as pq

    from rlkit.tasks.schema import TASK_CHECK_KEY

    write_index(path)
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), TASK_CHECK_KEY.encode(): value}),
                   path)
    return path


@pytest.mark.parametrize(("value", "needle"), [
    (b"[1, 2]", "the top level: Input should be a valid dictionary"),
    (b'{"broken": [1]}', "broken: Input should be a valid dictionary"),
    (b'{"broken": {"t": 5}}', "broken.t: Input should be a valid string"),
    (b'{"checked": "all"}', "checked: Input should be a valid integer"),
    (b"[" * 10_000, "nested"),
    (b'{"broken": {"t": 1e999999}}', "broken.t"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_index_metadata_of_an_unexpected_shape_is_a_warning_not_a_crash(ws, tmp_path: Path, value: bytes,
                                                                         needle: str) -> None:
    index = _index_with_metadata(tmp_path / "train.parquet", value)
    report = ws.preflight(ws.config(TRAIN_FILES=index), only=["data_files"])
    no_crash(report)
    (f,) = [f for f in report.by_check("data_files") if f.status is Status.WARN]
    assert f.key == "TRAIN_FILES" and str(index) in f.message and needle in f.message


def test_index_failure_reasons_reach_the_terminal_escaped(ws, tmp_path: Path) -> None:
    import json

    index = _index_with_metadata(tmp_path / "train.parquet", json.dumps(
        {"checked": 2, "broken": {f"t{ESCAPES}": f"reason {ESCAPES}"}}).encode())
    _rc, out = run_cli(["check", str(ws.config(TRAIN_FILES=index))], ws.environ())
    assert_clean(out)
    assert "failed `rlkit tasks check`" in out and "reason \\x1b]0;pwned\\x07" in out


def _lock(ws, kind: str) -> Path:
    lock = ws.root / "out" / "logs" / "exp.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    if kind in ("fifo", "zero_link"):
        special(lock, kind)
    elif kind == "deep":
        lock.write_text('{"pid": ' + "[" * 100_000 + "}")
    elif kind == "shape":
        lock.write_text('{"pid": "x", "children": 5}')
    elif kind == "escapes":  # a live-looking lock of another host whose host and user carry escapes
        import datetime as dt
        import json

        beat = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        lock.write_text(json.dumps({"pid": 1, "host": f"h{ESCAPES}", "user": f"u{ESCAPES}", "heartbeat": beat,
                                    "exp": "exp", "project": "proj", "phase": f"rollout{ESCAPES}"}))
    return lock


@pytest.mark.parametrize(("kind", "needle"), [("fifo", "is a FIFO"), ("zero_link", "is a character device"),
                                              ("deep", "nested too deeply"), ("shape", "pid: Input should be")])
def test_context_reads_a_hostile_run_lock_without_hanging(ws, kind: str, needle: str) -> None:
    lock = _lock(ws, kind)
    _rc, out = run_cli(["check", "--context", str(ws.config())], ws.environ())
    assert_clean(out)
    (line,) = [x for x in out.splitlines() if "⚠ run_in_flight: the run lock" in x]
    assert needle in line and str(lock) in line


def test_lock_host_and_user_reach_the_terminal_escaped(ws) -> None:
    _lock(ws, "escapes")
    rc, out = run_cli(["check", "--context", str(ws.config())], ws.environ())
    assert_clean(out)
    assert rc == 1 and "already running: pid 1 on h\\x1b]0;pwned\\x07" in out and "user u\\x1b]0;pwned" in out
    rc, out = run_cli(["status", str(ws.config())], ws.environ())
    assert_clean(out)
    assert rc == 0 and "phase rollout\\x1b]0;pwned" in out


def test_a_looping_chat_template_is_stopped_by_its_budget() -> None:
    from rlkit.proxy.parsers import TemplateBudgetExceeded, render_within

    class Looping:
        def apply_chat_template(self, *args, **kw):
            while True:  # what a template with nested 10^5 loops does for minutes
                pass

    with pytest.raises(TemplateBudgetExceeded):
        render_within(Looping(), 0.5)


def test_a_budget_verdict_is_a_fatal_that_says_so_and_is_not_cached(ws) -> None:
    verdict = ('{"parser": "qwen3_coder", "ok": false, "parses": [], "timed_out": true, "budget_s": 20, '
               '"detail": "the chat template did not finish rendering within its 20 s budget"}\n')
    calls = []

    def runner(argv: list[str]) -> str:
        calls.append(argv)
        return verdict

    for _ in range(2):
        report = ws.preflight(ws.config(), only=["tool_call_parser"], probe_runner=runner,
                              cache_dir=ws.root / "empty-cache")
        (f,) = fatals(report)
        assert "ran past its 20 s rendering budget" in f.message and f.key == "MODEL_PATH"
    assert len(calls) == 2  # probed again: a slow machine's budget verdict is never kept


@pytest.mark.slow
def test_the_real_probe_stops_a_looping_template(ws, tmp_path: Path) -> None:
    """The probe subprocess (transformers + verl) on a template that loops: a verdict, not a hang."""
    import subprocess
    import sys

    model = model_copy(ws.model_dir, tmp_path / "model")
    (model / "chat_template.jinja").unlink()
    (model / "chat_template.jinja").write_text(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}")
    proc = subprocess.run([sys.executable, "-m", "rlkit.proxy.parsers", "--budget-s=2", str(model), "qwen3_coder"],
                          capture_output=True, text=True, timeout=300, check=False)  # a hang guard
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    assert verdict["timed_out"] is True and "within its 2 s budget" in verdict["detail"]


# ---- raw terminal escapes -------------------------------------------------------------------------
def test_escape_in_the_config_file_name_is_shown_escaped(ws) -> None:
    cfg = ws.config(name=f"run{ESCAPES}.env")
    rc, out = run_cli(["check", str(cfg)], ws.environ())
    assert_clean(out)
    assert "run\\x1b]0;pwned\\x07" in out
    rc, out = run_cli(["check", str(cfg) + ".missing"], ws.environ())
    assert rc == 2 and "config file not found" in out
    assert_clean(out)


def test_escapes_in_model_config_kube_server_and_step_file_are_shown_escaped(ws, tmp_path: Path) -> None:
    import json

    model = model_copy(ws.model_dir, tmp_path / "model")
    config = json.loads((ws.model_dir / "config.json").read_text())
    (model / "config.json").unlink()
    (model / "config.json").write_text(json.dumps({**config, "model_type": f"qwen3{ESCAPES}"}))
    kube = tmp_path / "kubeconfig"
    kube.write_text(json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}],
                                "clusters": [{"name": "k", "cluster": {"server": f"https://h{ESCAPES}:1"}}]}))
    ckpt = ws.root / "out" / "checkpoints" / "proj" / "exp"
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text(f"3{ESCAPES}")
    ws.write_site(KUBECONFIG=kube)
    _rc, out = run_cli(["check", str(ws.config(MODEL_PATH=model, BACKEND="k8s"))], ws.environ())
    assert_clean(out)
    assert "(qwen3\\x1b]0;pwned" in out  # model_dir's ✓ line
    assert "kubernetes API https://h\\x1b]0;pwned" in out
    assert "unreadable checkpoint marker" in out and "does not hold a whole number" in out


# ---- absurd values ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "value", "why"), [
    ("N_RESP", 2**31 - 1, "responses per prompt"), ("MAX_SANDBOXES", 2**31 - 1, "sandboxes one node"),
    ("TOTAL_STEPS", 2**31 - 1, "steps"), ("VAL_N", 2**31 - 1, "responses per prompt"),
    ("TRAIN_BSZ", 2**31 - 1, "prompts per step"), ("KL_LOSS_COEF", "1e308", "loss coefficient"),
    ("LR", "1e-320", "learning rate"), ("ROLLOUT_GPU_MEM", "1e-300", "fraction of GPU memory"),
    ("NODE_WAIT_S", 0, "0 gives up at once"), ("REPLICA_WAIT_S", 0, "0 gives up at once"),
    ("MAX_PROMPT", 2**31 - 1, "tokens"),
])
def test_absurd_values_are_fatal_with_a_fix_that_says_why(ws, key: str, value: object, why: str) -> None:
    site = key in ("NODE_WAIT_S", "REPLICA_WAIT_S")
    if site:
        ws.write_site(**{key: value})
    (f,) = fatals(ws.preflight(ws.config(**({} if site else {key: value})), only=["types"]))
    assert f.key == key and "within its range" in f.fix and why in f.fix


def test_max_prompt_beyond_the_window_is_fatal_in_check_and_dry_run(ws) -> None:
    cfg = ws.config(MAX_PROMPT=10**6, MAX_RESP=2048)  # the tiny model's window is 40960
    for mode, (rc, out) in both_modes(ws, cfg).items():
        assert rc == 1 and "✗ FATAL context_length: MAX_PROMPT=1000000 is beyond the model's window" in out, mode
        assert "# Trainer" not in out and "vllm.entrypoints" not in out  # no plan printed with another window


def test_dry_run_prints_the_max_model_len_check_agreed_to(ws) -> None:
    cfg = ws.config(TRAINER="local", MAX_PROMPT=1024, MAX_RESP=2048)
    rc, out = run_cli(["train", str(cfg)], {**ws.environ(), "DRY_RUN": "1"})
    assert rc == 0, out
    assert "--max-model-len 3072" in out.split("TRAINER=local")[1]


def test_batch_beyond_the_index_and_sandboxes_beyond_the_cpus(ws) -> None:
    report = ws.preflight(ws.config(TRAIN_BSZ=8, MINI_BSZ=8), only=["data_files"])  # the index holds 2 tasks
    (f,) = fatals(report)
    assert f.key == "TRAIN_BSZ" and "holds 2 task(s)" in f.message and "lower TRAIN_BSZ to 2" in f.fix
    report = ws.preflight(ws.config(TRAIN_BSZ=8, MINI_BSZ=8, TRAINER="local"), only=["data_files"])
    assert [f.status for f in report.by_check("data_files") if f.key == "TRAIN_BSZ"] == [Status.WARN]
    report = ws.preflight(ws.config(MAX_SANDBOXES=4096), only=["capacity"])
    (f,) = report.by_check("capacity")
    assert f.status is Status.WARN and f.key == "MAX_SANDBOXES" and "CPU" in f.message


# ---- layers say what they override -----------------------------------------------------------------
def test_a_template_replacing_a_site_value_is_said(ws) -> None:
    ws.write_site(SANDBOX_NETWORK="rl-net")
    report = ws.preflight(ws.config(), only=["overrides"])
    (f,) = report.by_check("overrides")
    assert f.status is Status.WARN and f.key == "SANDBOX_NETWORK"
    assert "'rl-net' (site" in f.message and "scripts/templates/backend/docker.env" in f.message
    assert "set SANDBOX_NETWORK in the run config" in f.fix


def test_the_run_config_replacing_site_values_is_listed(ws) -> None:
    report = ws.preflight(ws.config(GPUS_PER_NODE=1, SP_SIZE=1), only=["overrides"])
    (f,) = report.by_check("overrides")
    assert f.status is Status.OK and "GPUS_PER_NODE='2' (site" in f.message and "-> '1' (run" in f.message


@pytest.mark.parametrize(("where", "key", "value"), [("site", "SCAFFOLD", "cc"), ("run", "HARBOR_AGENT", "evil"),
                                                     ("run", "REGISTRY", "evil.example/x"),
                                                     ("run", "DOCKER_HOST", "tcp://evil:2375")])
def test_keys_that_decide_who_runs_what_are_fatal_outside_their_layer_and_not_applied(ws, where: str, key: str,
                                                                                       value: str) -> None:
    if where == "site":
        ws.write_site(**{key: value})
        cfg = ws.config(**{key: None})
    else:
        cfg = ws.config(**{key: value})
    report = ws.preflight(cfg, only=["key_layer"])
    (f,) = fatals(report)
    assert f.key == key and "decides who runs what" in f.message
    assert str(getattr(report.resolved.config, key)) != value  # never applied from there


def test_an_ordinary_misplaced_key_stays_a_warning(ws) -> None:
    ws.write_site(TRAIN_BSZ=2)
    report = ws.preflight(ws.config(TRAIN_BSZ=None), only=["key_layer"])
    assert [(f.status, f.key) for f in report.by_check("key_layer")] == [(Status.WARN, "TRAIN_BSZ")]


# ---- OUTPUT_DIR ------------------------------------------------------------------------------------
def test_output_dir_climbing_out_is_refused_and_dry_run_writes_nothing_there(ws, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    cfg = ws.config(OUTPUT_DIR=f"../{outside.name}")
    for mode, (rc, out) in both_modes(ws, cfg).items():
        assert rc == 1 and "✗ FATAL output_dir: OUTPUT_DIR='../" in out, mode
    assert not outside.exists()
