"""Regression tests of issue 16: preflight never crashes, never hangs, never leaks a secret.

One test per kind the mutation run found: tracebacks, the hang, "check crashed" FATALs,
misleading messages, values accepted silently and a secret printed in full.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.validate.findings import MESSAGE_MAX, Status

REPO = Path(__file__).resolve().parents[2]
SECRET = "wandb-0123456789abcdef-SECRET"


def fatals(report, check: str | None = None) -> list:
    return [f for f in report.findings if f.status is Status.FATAL and (check is None or f.check == check)]


def no_crash(report) -> None:
    crashed = [f.render() for f in report.findings if "check crashed" in f.message or "did not finish" in f.message]
    assert not crashed, crashed


@pytest.fixture(autouse=True)
def warm_probe_cache(ws) -> None:
    """The parser probe's verdict for ws's model, cached: CLI runs here never spawn the probe."""
    warm(ws)


def warm(ws) -> None:
    from rlkit.validate.model import read_chat_template
    from rlkit.validate.parser_probe import cache_key

    d = ws.cache / "parser_probe"
    d.mkdir(parents=True, exist_ok=True)
    key = cache_key(ws.model_dir, read_chat_template(ws.model_dir) or "", "qwen3_coder")
    (d / f"{key}.json").write_text(json.dumps({"parser": "qwen3_coder", "ok": True, "detail": "round-trips",
                                               "parses": ["qwen3_coder"]}))


def cli(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlkit.cli.main", *argv], capture_output=True, text=True, cwd=REPO,
                          check=False, timeout=120,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env})


# ---- tracebacks ---------------------------------------------------------------------------------
def test_overlong_axis_value_is_a_type_error_not_a_path(ws) -> None:
    report = ws.preflight(ws.config(SCAFFOLD="x" * 300), only=["types"])
    (f,) = fatals(report)
    assert f.key == "SCAFFOLD" and "cc | ohsdk | oc | terminus" in f.fix and len(f.message) <= MESSAGE_MAX + 40


def test_axis_value_that_walks_out_is_never_loaded(ws, tmp_path: Path) -> None:
    evil = tmp_path / "evil.env"
    evil.write_text("HARBOR_AGENT=pwned\n")
    rel = os.path.relpath(evil.with_suffix(""), REPO / "scripts" / "templates" / "scaffold")
    report = ws.preflight(ws.config(SCAFFOLD=rel), only=["types", "config_syntax"])
    assert report.resolved.config.HARBOR_AGENT != "pwned"
    assert not any("evil" in f for f in report.resolved.layer_files.get(report.resolved.values["SCAFFOLD"].layer, []))
    assert [f.key for f in fatals(report)] == ["SCAFFOLD"]


@pytest.mark.parametrize("kind", ["loop", "under_file", "fifo"])
def test_unreadable_config_paths_are_config_errors(ws, tmp_path: Path, kind: str) -> None:
    from rlkit.config.resolve import resolve
    from rlkit.errors import ConfigError

    if kind == "loop":
        path = tmp_path / "loop.env"
        path.symlink_to(path)
    elif kind == "under_file":
        path = ws.config() / "x.env"
    else:
        path = tmp_path / "fifo.env"
        os.mkfifo(path)  # would block a plain open()
    with pytest.raises(ConfigError) as err:
        resolve(path, ws.environ())
    assert err.value.file and str(tmp_path) in err.value.message


def test_dry_run_with_non_ascii_head_and_huge_integer(ws) -> None:
    ws.write_site(RAY_HEAD_ADDRESS="héad.example")
    proc = cli(["train", str(ws.config(TRAIN_BSZ="9" * 4300))], {**ws.environ(), "DRY_RUN": "1"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "RAY_HEAD_ADDRESS=" in proc.stdout and "TRAIN_BSZ=" in proc.stdout and "must be in 1..65536" in proc.stdout
    assert len(proc.stdout) < 20_000


# ---- the hang -----------------------------------------------------------------------------------
def test_divisor_list_of_a_huge_world_is_quick_and_short(ws) -> None:
    from rlkit.validate.static import _divisors

    shown = _divisors(2**30)  # 31 divisors; the old loop tried a billion numbers
    assert "in all" in shown and len(shown) < 200
    ws.write_site(GPUS_PER_NODE=2**30)  # and the range stops such a world before any arithmetic
    (f,) = fatals(ws.preflight(ws.config(SP_SIZE=7), only=["types"]))
    assert f.key == "GPUS_PER_NODE" and "1..64" in f.message


# ---- "check crashed" ----------------------------------------------------------------------------
@pytest.mark.parametrize(("over", "site", "key"), [
    ({}, {"PROXY_PORT": 70000}, "PROXY_PORT"),
    ({}, {"PROXY_PORT": 0}, "PROXY_PORT"),
    ({}, {"DOCKER_HOST": "tcp://localhost:99999"}, "DOCKER_HOST"),
    ({"MODEL_PATH": "/tmp/a\\x00b"}, {}, "MODEL_PATH"),
    ({"MODEL_PATH": "/tmp/" + "m" * 300}, {}, "MODEL_PATH"),
    ({"OUTPUT_DIR": "/tmp/" + "o" * 300}, {}, "OUTPUT_DIR"),
    ({"EXP_NAME": "e" * 300}, {}, "EXP_NAME"),
    ({"LR": "nan"}, {}, "LR"),
    ({"LR": "1e999"}, {}, "LR"),
    ({"ROLLOUT_GPU_MEM": 7}, {}, "ROLLOUT_GPU_MEM"),
    ({"MAX_SANDBOXES": 0}, {}, "MAX_SANDBOXES"),
    ({"TRAIN_BSZ": 0}, {}, "TRAIN_BSZ"),
])
def test_out_of_range_values_are_type_fatals(ws, over: dict, site: dict, key: str) -> None:
    if site:
        ws.write_site(**site)
    cfg = ws.config(**over)
    if "\\x00" in str(over.get("MODEL_PATH", "")):
        cfg.write_text(cfg.read_text().replace("\\x00", "\x00"))
    report = ws.preflight(cfg)
    no_crash(report)
    checks = {"types", "config_syntax"} if "\\x00" in str(over.get("MODEL_PATH", "")) else {"types"}  # NUL: the line
    assert key in [f.key for f in fatals(report) if f.check in checks]


def test_nul_in_output_dir_is_rejected(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text() + 'OUTPUT_DIR="/tmp/out\x00put"\n')
    report = ws.preflight(cfg)
    no_crash(report)
    assert [f.key for f in fatals(report, "config_syntax")] == ["OUTPUT_DIR"]  # a control character in the line


def _model_copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():  # weights linked (never read); the files rlkit reads copied: no link out of the folder
        if f.suffix in (".safetensors", ".bin"):
            (dst / f.name).symlink_to(f)
        else:
            shutil.copy(f, dst / f.name)
    return dst


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("config.json", b"[]", "the top level: Input should be a valid dictionary"),
    ("config.json", b'{"a": "\xff\xfe"}', "not UTF-8"),
    ("config.json", b"{nope", "not valid JSON"),
    ("config.json", b"[" * 100_000, "nested too deeply"),
    ("tokenizer_config.json", b'{"chat_template": 5}', "chat_template: Input should be a valid string"),
    ("tokenizer_config.json", b'{"chat_template": ["x"]}', "chat_template.0: Input should be a valid dictionary"),
    ("chat_template.jinja", b"\xff{{ messages }}", "not UTF-8"),
])
def test_malformed_model_files_are_fatals_naming_the_file(ws, tmp_path: Path, name: str, content: bytes,
                                                          needle: str) -> None:
    model = _model_copy(ws.model_dir, tmp_path / "model")
    (model / name).unlink(missing_ok=True)
    if name != "chat_template.jinja":
        (model / "chat_template.jinja").unlink(missing_ok=True)
    (model / name).write_bytes(content)
    report = ws.preflight(ws.config(MODEL_PATH=model), probe_runner=lambda argv: "")
    no_crash(report)
    (f,) = fatals(report, "model_dir")
    assert name in f.message and needle in f.message and f.key == "MODEL_PATH"


@pytest.mark.parametrize(("content", "needle"), [
    (b"just-a-scalar\n", "not a mapping"),
    (b"- a\n- b\n", "not a mapping"),
    (b"\x00\xff\xfebinary", "not UTF-8"),
    (b"contexts: 5\n", "contexts: Input should be a valid list"),
    (b"contexts: [{name: [1]}]\ncurrent-context: x\n", "contexts.0.name: Input should be a valid string"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: 3}]\n",
     "clusters.0.cluster: Input should be a valid dictionary"),
    ((b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h:99999'}}]\n"), "unreachable"),
    (b"a: [" * 5000, "YAML"),
])
def test_hostile_kubeconfig_is_a_fatal_naming_it(ws, tmp_path: Path, content: bytes, needle: str) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_bytes(content)
    ws.write_site(KUBECONFIG=kc)
    report = ws.preflight(ws.config(BACKEND="k8s"), only=["backend"])
    no_crash(report)
    (f,) = fatals(report, "backend")
    assert needle in f.message and f.key == "KUBECONFIG" and (str(kc) in f.message or "kubernetes API" in f.message)


def _deep_parquet(path: Path, depth: int) -> Path:
    """A parquet footer whose schema is `depth` nested groups (thrift compact, by hand)."""
    def varint(n: int) -> bytes:
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    def element(name: str, children: int) -> bytes:
        body = bytes([0x48]) + varint(len(name)) + name.encode()  # field 4, binary
        if children:
            body += bytes([0x15]) + varint(children << 1)  # field 5, i32 (zigzag)
        return body + b"\x00"

    elements = [element("root", 1)] + [element(f"g{i}", 1) for i in range(depth)] + [element("leaf", 0)]
    footer = bytes([0x15]) + varint(1 << 1)  # field 1 version
    footer += bytes([0x19]) + bytes([0xFC]) + varint(len(elements)) + b"".join(elements)  # field 2 list<struct>
    footer += bytes([0x16]) + varint(3 << 1)  # field 3 num_rows (i64 zigzag)
    footer += b"\x00"
    path.write_bytes(b"PAR1" + footer + struct.pack("<I", len(footer)) + b"PAR1")
    return path


def test_parquet_footers_truncated_or_3000_deep(ws, tmp_path: Path) -> None:
    deep = _deep_parquet(tmp_path / "deep.parquet", 3000)
    from rlkit.validate._parquet_footer import read_footer

    assert read_footer(str(deep)) == (3, ["g0"])  # walked without recursion
    good = ws.train.read_bytes()
    truncated = tmp_path / "trunc.parquet"
    length = struct.unpack("<I", good[-8:-4])[0]
    footer = good[-8 - length:-8]
    truncated.write_bytes(b"PAR1" + footer[:12] + struct.pack("<I", 12) + b"PAR1")  # cut inside the schema
    lying = tmp_path / "lying.parquet"  # a list claiming 2^60 booleans: must not loop
    body = bytes([0x19, 0xF1]) + b"\xff" * 8 + b"\x0f" + b"\x00"
    lying.write_bytes(b"PAR1" + body + struct.pack("<I", len(body)) + b"PAR1")
    for path in (truncated, lying, tmp_path):
        report = ws.preflight(ws.config(TRAIN_FILES=path), only=["data_files"])
        no_crash(report)
        (f,) = fatals(report, "data_files")
        assert f.key == "TRAIN_FILES" and str(path) in f.message


# ---- misleading messages ------------------------------------------------------------------------
def test_train_files_directory_is_reported_as_a_directory(ws, tmp_path: Path) -> None:
    (f,) = fatals(ws.preflight(ws.config(TRAIN_FILES=tmp_path), only=["data_files"]))
    assert "is a directory" in f.message and "does not exist" not in f.message


def test_rejected_line_is_one_fatal_not_two(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text().replace("EXP_NAME=exp", "EXP_NAME=my exp"))
    report = ws.preflight(cfg)
    assert [(f.check, f.key) for f in fatals(report) if f.key == "EXP_NAME"] == [("config_syntax", "EXP_NAME")]


def test_syntax_errors_name_the_key(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text() + 'LOGGER="console\n')
    (f,) = fatals(ws.preflight(cfg, only=["config_syntax"]))
    assert f.message.startswith("LOGGER:") and f.key == "LOGGER"


def test_comment_without_space_gets_the_right_advice(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text().replace("TRAIN_BSZ=2", "TRAIN_BSZ=2# prompts"))
    (f,) = fatals(ws.preflight(cfg, only=["config_syntax"]))
    assert "space before '#'" in f.fix and "TRAIN_BSZ=2 # prompts" in f.fix and "quote" not in f.fix


@pytest.mark.parametrize("sep", ["\f", "\v", "\x85", "\u2028", "\r"])
def test_line_numbers_count_newlines_only(ws, sep: str) -> None:
    cfg = ws.config()
    cfg.write_text(f"# one{sep}two\nPROJECT_NAME=proj\nEXP_NAME=exp\nNOT_A_KEY=1\n" + cfg.read_text(),
                   newline="")
    report = ws.preflight(cfg, only=["unknown_key"])
    (f,) = fatals(report)
    assert f.where == f"{cfg}:4"


def test_byte_order_mark_is_a_warning_and_the_key_still_reads(ws) -> None:
    cfg = ws.config()
    cfg.write_bytes(b"\xef\xbb\xbf" + cfg.read_bytes())
    report = ws.preflight(cfg, only=["config_syntax", "unknown_key", "names"])
    assert not fatals(report)
    assert any("byte-order mark" in f.message and f.status is Status.WARN for f in report.findings)


def test_non_utf8_config_names_line_and_byte_offset(ws) -> None:
    cfg = ws.config()
    cfg.write_bytes(b"PROJECT_NAME=proj\nEXP_NAME=\xe9t\xe9\n")
    proc = cli(["check", str(cfg)], ws.environ())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "line 2" in proc.stderr and "byte offset 27" in proc.stderr


# ---- bounded output -----------------------------------------------------------------------------
def test_80000_unknown_keys_give_a_count_and_the_first_few(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text() + "".join(f"UNKNOWN_{i}=1\n" for i in range(80_000)))
    report = ws.preflight(cfg, only=["unknown_key", "config_syntax"])
    unknown = report.by_check("unknown_key")
    assert len(unknown) == 10 and "79991 more finding(s)" in unknown[-1].message
    assert len(report.render()) < 20_000


# ---- secrets ------------------------------------------------------------------------------------
def test_secret_masked_by_value_in_check_and_dry_run(ws) -> None:
    env = {**ws.environ(), "WANDB_API_KEY": SECRET}
    cfg = ws.config(EXP_NAME="run-${WANDB_API_KEY}", LOGGER="console,file,wandb")
    plan_cfg = ws.config(LOGGER="console,file,wandb", HARBOR_AGENT="agent-${WANDB_API_KEY}", name="plan.env")
    for argv, extra in ((["check", str(cfg)], {}), (["train", str(cfg)], {"DRY_RUN": "1"}),
                        (["train", str(plan_cfg)], {"DRY_RUN": "1"})):
        proc = cli(argv, {**env, **extra})
        assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    # HARBOR_AGENT in the run config decides who runs: FATAL, and never applied (issue 25)
    assert proc.returncode == 1 and "✗ FATAL key_layer: HARBOR_AGENT" in proc.stdout and "agent-" not in proc.stdout
    names = ws.preflight(cfg, only=["names"], environ=env).by_check("names")
    assert [(f.status, f.key) for f in names] == [(Status.FATAL, "EXP_NAME")]  # a secret never names a directory


@pytest.mark.parametrize("line", [f"WANDB_API_KEY={SECRET} extra", f"WANDB_API_KEY {SECRET}",
                                  f"WANDB_API_KEY='{SECRET}", f"WANDB_API_KEY=$({SECRET})"])
def test_secret_on_a_rejected_line_is_never_echoed(ws, line: str) -> None:
    ws.write_site(WANDB_API_KEY=None)
    ws.site.write_text(ws.site.read_text() + line + "\n")
    proc = cli(["check", str(ws.config())], ws.environ())
    assert proc.returncode == 1 and SECRET not in proc.stdout + proc.stderr
    assert "WANDB_API_KEY" in proc.stdout


def test_mask_secrets_helper_and_log_filter() -> None:
    import logging

    from rlkit.config.display import CleanFilter
    from rlkit.config.secrets import mask_secrets

    assert mask_secrets(f"a {SECRET} b {SECRET}", [SECRET, "abc"]) == "a **** b ****"
    assert mask_secrets("x 1 y", ["1"]) == "x 1 y"  # too short to mask inside other text
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "key %s\x1b]0;t\x07", (SECRET,), None)
    assert CleanFilter([SECRET]).filter(record) and record.getMessage() == "key ****\\x1b]0;t\\x07"


def test_launch_plan_masks_secrets_by_value(ws) -> None:
    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan

    resolved = resolve(ws.config(EXP_NAME="r-${WANDB_API_KEY}", LOGGER="console,file,wandb"),
                       {**ws.environ(), "WANDB_API_KEY": SECRET})
    text = build_plan(resolved, ips={"127.0.0.1"}).render()
    assert SECRET not in text and "r-****" in text


def test_json_of_a_finding_message_is_bounded(ws) -> None:
    cfg = ws.config()
    cfg.write_text(cfg.read_text() + f"BOGUS_KEY=\"{'y' * 100_000}\n")
    report = ws.preflight(cfg, only=["config_syntax"])
    assert all(len(f.message) <= MESSAGE_MAX + 40 for f in report.findings)
    json.dumps([f.message for f in report.findings])


@pytest.mark.parametrize("header", [b"[]", b"{\"w\": 5}", b"{\"w\": {\"shape\": [\"x\"]}}", b"[" * 50_000,
                                    b"{\"w\": {\"shape\": [1099511627775, 1099511627775, 1099511627775]}}"])
def test_hostile_safetensors_header_never_crashes_the_local_trainer_check(ws, tmp_path: Path, header: bytes) -> None:
    model = _model_copy(ws.model_dir, tmp_path / "model")
    for f in model.glob("*.safetensors"):
        f.unlink()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    report = ws.preflight(ws.config(MODEL_PATH=model, TRAINER="local"), only=["local_trainer"])
    no_crash(report)
