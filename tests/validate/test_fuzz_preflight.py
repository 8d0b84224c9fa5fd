"""Property-based fuzzing of the env-file reader and the whole check / DRY_RUN path (issue 16).

Inputs: random bytes as a config, random mutations of the shipped and test configs
(values, lines, bytes, references, the secret), and hostile files the config points at
(model config.json, chat template, kube config, parquet index).

Invariants, for every input:
  - the outcome is exit 0, 1 or 2 (a report, or a ConfigError for an unreadable config);
  - no exception escapes, and no check crashes or hangs ("check crashed" / "did not finish");
  - nothing is executed (a marker that `$(...)` and backticks would create never appears);
  - every FATAL names a key or a file;
  - the secret's value never appears in the output (block, findings, launch plan);
  - output is bounded, and each example runs within hypothesis' deadline (a hang guard).

CI runs RLKIT_FUZZ_EXAMPLES examples (default 150 per property, ~20 s) with a fixed seed; a longer
run is one variable away: RLKIT_FUZZ_EXAMPLES=5000 RLKIT_FUZZ_SEED=random pytest tests/validate/test_fuzz_preflight.py
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from rlkit.config.schema import KEYS
from rlkit.errors import ConfigError, UserError
from rlkit.validate.findings import Phase, Status

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("RLKIT_FUZZ_EXAMPLES", "150"))
SEED = os.environ.get("RLKIT_FUZZ_SEED", "1616")
SECRET = "wandb-Zq8Xr2Lm5Nv7Tp1Kd4Hs9Wf3"
MARKER = Path(tempfile.gettempdir()) / f"rlkit-fuzz-executed-{uuid.uuid4().hex}"
OUTPUT_MAX = 200_000  # characters of a whole report: 80,000 bad lines must not print 13 MB
TRIED = {"reader": 0, "preflight": 0, "dry_run": 0, "exit 0": 0, "exit 1": 0, "exit 2": 0}

SEED_VALUE = random.getrandbits(32) if SEED == "random" else int(SEED)
_seed = seed(SEED_VALUE)
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=30), database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                  HealthCheck.data_too_large, HealthCheck.large_base_example])

SPECIALS = [
    "", "0", "-1", "1", "70000", "99999", "nan", "inf", "-inf", "1e309", "1e-320", "9" * 4400, "0x10", "1_000",
    "x" * 300, "a/" * 2100, "../../../../etc/passwd", "/dev/zero", "/proc/self/fd/0", "~", "~nosuchuser/x",
    "\x00", "a\x00b", "\ufeffx", "\u2028", "\x85", "\r", "\f", "\v", "\t", "h\u00e9ad", "\U0001f600",
    f"$(touch {MARKER})", f"`touch {MARKER}`", "${WANDB_API_KEY}", "run-${WANDB_API_KEY}", "${NOPE}",
    "${A", "$HOME", "\\$x", "'quoted'", '"dq"', "'open", '"open', "2# comment", "a #b", "a b", "a;b", "a|b",
    "tcp://localhost:99999", "tcp://[::1]:2375", "unix://", "ssh://", "http://h:0", "CHANGEME",
    "${TRAIN_BSZ}${TRAIN_BSZ}", "${EXP_NAME}", "cc", "k8s", "async", "veomni", "ppo", "hermes", "local",
]
VALUES = st.one_of(st.sampled_from(SPECIALS), st.text(max_size=40),
                   st.integers(min_value=-(10**30), max_value=10**30).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
NAMES = st.one_of(st.sampled_from(KEYS), st.sampled_from(["WANDB_API_KEY", "SCAFFOLD", "BACKEND", "MODEL_PATH"]),
                  st.text(min_size=1, max_size=12))

JSON_HOSTILE = [b"[]", b"{}", b"null", b"5", b'"x"', b"{nope", b"\xff\xfe{}", b"[" * 5000, b'{"chat_template": 5}',
                b'{"chat_template": ["x"]}', b'{"chat_template": [{"name": "default"}]}', b'{"text_config": 5}',
                b'{"max_position_embeddings": true, "num_experts": 1e999}', b'{"torch_dtype": []}',
                b'{"model_type": "' + b"m" * 5000 + b'"}']
YAML_HOSTILE = [b"scalar", b"- a\n- b\n", b"\x00\xff", b"a: [" * 3000, b"contexts: 5", b"contexts: [{name: [1]}]",
                b"current-context: [1]", b"&a [*a, *a]", b"current-context: c\ncontexts: [{name: c, context: 5}]",
                (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: "
                b"[{name: k, cluster: {server: 'https://h:99999'}}]\n"), b"!!python/object:os.system x"]
PARQUET_HOSTILE = [b"PAR1", b"PAR1" + b"\x00" * 8 + b"PAR1", b"PAR1\x19\xf1" + b"\xff" * 8 + b"\x0f\x00"
                   + (12).to_bytes(4, "little") + b"PAR1", b"PAR1" + b"\x1c" * 4000 + (4000).to_bytes(4, "little")
                   + b"PAR1"]
FILES = {"model/config.json": JSON_HOSTILE, "model/tokenizer_config.json": JSON_HOSTILE,
         "model/chat_template.jinja": [b"\xff", b"{{", b""], "kubeconfig": YAML_HOSTILE,
         "data/train.parquet": PARQUET_HOSTILE}
FILE_CONTENT = st.one_of(st.binary(max_size=300), st.sampled_from([c for cs in FILES.values() for c in cs]))


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["set", "set", "set", "line", "bytes", "delete", "dup", "secret_line", "file",
                                 "site"]))
    if kind in ("set", "site"):
        return kind, draw(NAMES), draw(VALUES), draw(st.sampled_from(["", "'", '"', "export "]))
    if kind == "line":
        return kind, draw(st.one_of(st.text(max_size=80), st.sampled_from(SPECIALS))), None, None
    if kind == "bytes":
        return kind, draw(st.binary(min_size=1, max_size=40)), draw(st.integers(0, 10_000)), None
    if kind in ("delete", "dup"):
        return kind, draw(st.integers(0, 60)), None, None
    if kind == "secret_line":
        return kind, draw(st.sampled_from([f"WANDB_API_KEY={SECRET} x", f"WANDB_API_KEY {SECRET}",
                                           f"WANDB_API_KEY='{SECRET}", f"WANDB_API_KEY=$({SECRET})",
                                           f"WANDB_API_KEY = {SECRET}", f"export WANDB_API_KEY={SECRET}#c"])), None, None
    return kind, draw(st.sampled_from(sorted(FILES))), draw(FILE_CONTENT), None


def _quote(value: str, how: str) -> str:
    if how in ("'", '"'):
        return f"{how}{value}{how}"
    return value


def _apply(root: Path, base: str, site: str, mutations: list) -> tuple[bytes, bytes]:
    run_lines = base.splitlines()
    site_lines = site.splitlines()
    for kind, a, b, c in mutations:
        if kind == "set":
            run_lines.append(f"{c if c == 'export ' else ''}{a}={_quote(b, c)}")
        elif kind == "site":
            site_lines.append(f"{a}={_quote(b, c)}")
        elif kind == "line":
            run_lines.insert(len(run_lines) // 2, a)
        elif kind == "delete" and run_lines:
            run_lines.pop(a % len(run_lines))
        elif kind == "dup" and run_lines:
            run_lines.append(run_lines[a % len(run_lines)])
        elif kind == "secret_line":
            site_lines.append(a)
        elif kind == "file":
            target = root / a
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            target.write_bytes(b)
        # "bytes" mutations are spliced into the encoded text below
    text = ("\n".join(run_lines) + "\n").encode("utf-8", "surrogatepass")
    for kind, a, b, _ in mutations:
        if kind == "bytes":
            pos = b % (len(text) + 1)
            text = text[:pos] + a + text[pos:]
    return text, ("\n".join(site_lines) + "\n").encode("utf-8", "surrogatepass")


@pytest.fixture
def fuzz_base(ws) -> dict:
    """A workspace whose model / index / kube config are copies the fuzzer may overwrite."""
    root = ws.root
    shutil.copytree(ws.model_dir, root / "model", symlinks=False)
    (root / "kubeconfig").write_text("apiVersion: v1\nclusters: []\ncontexts: []\n")
    values = ws.run_values()
    values.update(MODEL_PATH=root / "model", TRAIN_FILES=ws.train, KUBECONFIG=root / "kubeconfig")
    base = "".join(f"{k}={v}\n" for k, v in values.items() if k != "KUBECONFIG")
    shipped = (REPO / "examples" / "configs" / "embedded.env").read_text()
    site = "".join(f"{k}={v}\n" for k, v in ws.site_values.items()) + f"KUBECONFIG={root / 'kubeconfig'}\n"
    return {"ws": ws, "root": root, "bases": [base, shipped], "site": site}


def _probe(argv: list[str]) -> str:
    return '{"parser": "qwen3_coder", "ok": true, "detail": "stub", "parses": ["qwen3_coder"]}\n'


def _check_report(report, text: str) -> None:
    bad = [f.render() for f in report.findings if "check crashed" in f.message or "did not finish" in f.message]
    assert not bad, bad
    nameless = [f.render() for f in report.findings if f.status is Status.FATAL and not (f.key or f.where)]
    assert not nameless, nameless
    assert SECRET not in text
    assert len(text) < OUTPUT_MAX


def _invariants_after(outcome: int) -> None:
    assert outcome in (0, 1, 2)
    TRIED[f"exit {outcome}"] += 1
    assert not MARKER.exists(), "a config ran a command"


@_seed
@FUZZ
@given(data=st.binary(max_size=2000))
def test_reader_on_random_bytes(tmp_path_factory, data: bytes) -> None:
    from rlkit.config.envfile import read_env_file

    TRIED["reader"] += 1
    path = tmp_path_factory.mktemp("r") / "run.env"
    path.write_bytes(data)
    try:
        env = read_env_file(path, secret_keys=frozenset({"WANDB_API_KEY"}))
    except ConfigError as exc:
        assert exc.file and len(exc.message) < 600
        return
    for err in env.errors:
        assert err.file == str(path) and err.line and 1 <= err.line <= data.count(b"\n") + 1
        assert len(err.message) < 600 and len(err.fix) < 600
    for entry in env.entries:
        assert "\n" not in entry.value and 1 <= entry.line <= data.count(b"\n") + 1


@_seed
@FUZZ
@given(which=st.integers(0, 1), mutations=st.lists(mutation(), min_size=1, max_size=6), dry_run=st.booleans())
def test_check_and_dry_run_on_mutated_configs(fuzz_base, which: int, mutations: list, dry_run: bool) -> None:
    from rlkit.config.resolve import resolve
    from rlkit.launch.plan import build_plan
    from rlkit.validate.preflight import run_preflight

    ws, root = fuzz_base["ws"], fuzz_base["root"]
    case = Path(tempfile.mkdtemp(dir=root))
    shutil.copytree(root / "model", case / "model", symlinks=True)
    shutil.copy(root / "kubeconfig", case / "kubeconfig")
    (case / "data").mkdir()
    shutil.copy(ws.train, case / "data" / "train.parquet")
    base = fuzz_base["bases"][which].replace(str(root / "model"), str(case / "model")).replace(
        str(ws.train), str(case / "data" / "train.parquet"))
    site = fuzz_base["site"].replace(str(root / "kubeconfig"), str(case / "kubeconfig"))
    run_text, site_text = _apply(case, base, site, mutations)
    (case / "run.env").write_bytes(run_text)
    (case / "site.env").write_bytes(site_text)
    environ = {**ws.environ(), "RLKIT_SITE_ENV": str(case / "site.env"), "WANDB_API_KEY": SECRET}
    TRIED["dry_run" if dry_run else "preflight"] += 1
    try:
        phases = (Phase.STATIC,) if dry_run else (Phase.STATIC, Phase.WORLD)
        report = run_preflight(case / "run.env", environ=environ, probe_runner=_probe, phases=phases)
    except ConfigError as exc:  # exit 2: the run config (or site.env) cannot be read
        assert exc.file and SECRET not in str(exc)
        _invariants_after(2)
        return
    text = report.render()
    _check_report(report, text)
    if dry_run and report.ok:
        try:
            plan = build_plan(resolve(case / "run.env", environ), ips={"127.0.0.1"}).render()
        except UserError as exc:  # exit 2 (e.g. a head name that does not resolve)
            assert exc.key and SECRET not in str(exc)
            _invariants_after(2)
            return
        assert SECRET not in plan and len(plan) < OUTPUT_MAX
    _invariants_after(0 if report.ok else 1)


HOSTILE_CLI = [
    ("EXP_NAME=run-${WANDB_API_KEY}\nLOGGER=console,file,wandb\n", ""),
    (f"SCAFFOLD={'../' * 8}tmp/evil\nTRAIN_BSZ=2# prompts\nLR=nan\n", f"WANDB_API_KEY={SECRET} oops\n"),
    (f"MODEL_PATH=$(touch {MARKER})\nOUTPUT_DIR=`touch {MARKER}`\n", "PROXY_PORT=70000\nRAY_HEAD_ADDRESS=h\u00e9ad\n"),
    ("\ufeffPROJECT_NAME=p\fEXP_NAME=e\nTRAIN_BSZ=" + "9" * 4400 + "\n", "GPUS_PER_NODE=1073741824\n"),
]


@pytest.mark.parametrize(("extra_run", "extra_site"), HOSTILE_CLI)
@pytest.mark.parametrize("mode", ["check", "dry_run"])
def test_cli_subprocess_invariants(fuzz_base, extra_run: str, extra_site: str, mode: str) -> None:
    from tests.validate.test_hostile_configs import warm

    ws, root = fuzz_base["ws"], fuzz_base["root"]
    warm(ws)  # the parser probe's verdict, cached for the CLI runs (the probe imports verl: slow)
    (root / "run.env").write_text(fuzz_base["bases"][0].replace(str(root / "model"), str(ws.model_dir)) + extra_run)
    (root / "site.env").write_text(fuzz_base["site"] + extra_site)
    argv = ["check", str(root / "run.env")] if mode == "check" else ["train", str(root / "run.env")]
    env = {"PATH": os.environ["PATH"], "HOME": str(root), **ws.environ(), "RLKIT_SITE_ENV": str(root / "site.env"),
           "WANDB_API_KEY": SECRET, **({"DRY_RUN": "1"} if mode == "dry_run" else {})}
    proc = subprocess.run([sys.executable, "-m", "rlkit.cli.main", *argv], capture_output=True, text=True,
                          cwd=REPO, env=env, check=False, timeout=300)  # a hang guard, not a speed test
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), out
    assert "Traceback" not in out and "check crashed" not in out and SECRET not in out
    assert not MARKER.exists()
    for line in out.splitlines():
        if line.strip().startswith("✗ FATAL"):
            assert "(" in line or any(k in line for k in KEYS), line  # names a file:line or a key


@pytest.fixture(scope="module", autouse=True)
def _report_how_many_inputs_were_tried(request: pytest.FixtureRequest):
    """Prints, after this module's tests, how many inputs the fuzz tried (the long run's figure)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"fuzz inputs tried: {TRIED} (RLKIT_FUZZ_EXAMPLES={EXAMPLES}, seed {SEED_VALUE})")
