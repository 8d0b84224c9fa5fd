"""Property-based fuzzing of the env-file reader and of every command that reads what a config
points at (issues 16 and 25).

Inputs: random bytes as a config; random mutations of the shipped and test configs (values, lines,
bytes, references, the secret, keys named like credentials); and the files the config points at,
generated: the model directory (config.json, tokenizer_config.json, chat template), the task index
(its parquet footer and its rlkit.task_check metadata), the run lock, the checkpoint marker, the
run's metric log and step summary, the kube config. Their content is hostile JSON / YAML / bytes
carrying terminal escapes and the secrets, or a special file takes their place: a FIFO, a link to
/dev/zero or /dev/null, a directory, a symlink loop.

Each case runs one command in-process exactly as `rlkit` runs it (tests/validate/helpers.run_cli: the
command's streams cleaned by rlkit.config.display): `rlkit check`, `rlkit check --context`, DRY_RUN
(`rlkit train` with DRY_RUN=1, which writes the agent-loop YAML) or `rlkit status`. One part is stood
in for: the tool-call parser probe's subprocess (it imports verl and transformers) answers from a stub;
tests/validate/test_parser_probe.py and test_hostile_files.py run the real one.

Invariants, asserted for every case:
  - no traceback: no exception escapes the command; the exit code is 0, 1 or 2;
  - no hang past a bound: the command finishes within run_cli's bound (and hypothesis' deadline);
  - no crashed check ("check crashed" / "did not finish"); every FATAL names a key or a file;
  - no secret in any output stream, nor in any file the command wrote;
  - no raw control character in the output (only newline and tab);
  - nothing executed: the marker `$(...)` or backticks would create never appears.

CI runs RLKIT_FUZZ_EXAMPLES examples per property (default 150) with a fixed seed; a longer run is
one variable away (-s prints how many inputs were tried):
RLKIT_FUZZ_EXAMPLES=5000 RLKIT_FUZZ_SEED=random pytest -s tests/validate/test_fuzz_preflight.py
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from rlkit.config.schema import KEYS
from rlkit.errors import ConfigError
from tests.validate.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("RLKIT_FUZZ_EXAMPLES", "150"))
SEED = os.environ.get("RLKIT_FUZZ_SEED", "2525")
SECRET = "wandb-Zq8Xr2Lm5Nv7Tp1Kd4Hs9Wf3"
SECRET2 = "hf_Qw3Er5Ty7Ui9Op1As2Df4"  # HF_TOKEN of the environment: a secret by its name only
SECRETS = (SECRET, SECRET2)
ESCAPES = ["\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\x07", "\r", "\u202e", "\x1b]52;c;SGVsbG8=\x07"]
MARKER = Path(tempfile.gettempdir()) / f"rlkit-fuzz-executed-{uuid.uuid4().hex}"
OUTPUT_MAX = 200_000  # characters of a whole report: 80,000 bad lines must not print 13 MB
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MODES = ("check", "context", "dry_run", "status")
TRIED: dict[str, int] = {"reader": 0, **{m: 0 for m in MODES}, "exit 0": 0, "exit 1": 0, "exit 2": 0,
                         "special files": 0, "generated files": 0}

SEED_VALUE = random.getrandbits(32) if SEED == "random" else int(SEED)
_seed = seed(SEED_VALUE)
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=120), database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])

SPECIALS = [
    "", "0", "-1", "1", "70000", "99999", "2147483647", "nan", "inf", "-inf", "1e309", "1e-320", "1e308",
    "9" * 4400, "0x10", "1_000", "x" * 300, "a/" * 2100, "../../../../etc/passwd", "/dev/zero", "/proc/self/fd/0",
    "~", "~nosuchuser/x", "\x00", "a\x00b", "\ufeffx", "\u2028", "\x85", "\r", "\f", "\v", "\t", "h\u00e9ad",
    "\U0001f600", *ESCAPES, f"$(touch {MARKER})", f"`touch {MARKER}`", "${WANDB_API_KEY}", "run-${WANDB_API_KEY}",
    "console,${WANDB_API_KEY}", "${NOPE}", "${A", "$HOME", "\\$x", "'quoted'", '"dq"', "'open", '"open',
    "2# comment", "a #b", "a b", "a;b", "a|b", "tcp://localhost:99999", "tcp://[::1]:2375", "unix://", "ssh://",
    "http://h:0", "CHANGEME", "${TRAIN_BSZ}${TRAIN_BSZ}", "${EXP_NAME}", "cc", "k8s", "async", "veomni", "ppo",
    "hermes", "local", SECRET, f"x {SECRET}", f"{SECRET[:12]},{SECRET[12:]}", SECRET2, "rl-net", "bridge",
]
TEXT = st.one_of(st.sampled_from(SPECIALS), st.text(max_size=40))
VALUES = st.one_of(TEXT, st.integers(min_value=-(10**30), max_value=10**30).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
NAMES = st.one_of(st.sampled_from([k for k in KEYS if k != "OUTPUT_DIR"]),
                  st.sampled_from(["WANDB_API_KEY", "SCAFFOLD", "BACKEND", "MODEL_PATH", "HARBOR_AGENT",
                                   "SANDBOX_NETWORK", "HF_TOKEN", "openai_api_key", "GITHUB_TOKEN"]),
                  st.text(min_size=1, max_size=12).filter(lambda k: k.upper() != "OUTPUT_DIR"))
# OUTPUT_DIR is where DRY_RUN writes: values that exercise it without writing outside the case folder
OUTPUT_DIRS = ["../x", "../../..", "out/../../..", "/dev/zero", "/dev/null/x", "/proc/self/fd/0", "~", "o" * 300,
               "out\x00x", f"out{ESCAPES[0]}", "out-${WANDB_API_KEY}", "./nested/../out"]

# Generated JSON: the fields rlkit's readers look for, with values of every type, escapes and secrets.
FIELDS = ["max_position_embeddings", "text_config", "num_experts", "model_type", "torch_dtype", "tie_word_embeddings",
          "chat_template", "name", "template", "pid", "host", "user", "heartbeat", "step", "phase", "children",
          "checked", "broken", "current-context", "contexts", "clusters", "cluster", "server", "context", "data",
          "world_size", "outcomes"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(SPECIALS), st.text(max_size=20))
JSON_DOC = st.recursive(SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), c, max_size=5)),
    max_leaves=20)
JSON_HOSTILE = [b"[]", b"{}", b"null", b"5", b'"x"', b"{nope", b"\xff\xfe{}", b"[" * 5000, b"[" * 100 + b"]" * 100,
                b'{"chat_template": 5}', b'{"chat_template": ["x"]}', b'{"chat_template": [{"name": "default"}]}',
                b'{"text_config": 5}', b'{"max_position_embeddings": -5}', b'{"max_position_embeddings": "4096"}',
                b'{"max_position_embeddings": ' + b"9" * 5000 + b"}", b'{"max_position_embeddings": NaN}',
                b'{"max_position_embeddings": true, "num_experts": 1e999}', b'{"torch_dtype": []}',
                b'{"model_type": "' + b"m" * 5000 + b'"}', b'{"pid": 1, "host": "h\\u001b]0;x\\u0007"}']
YAML_HOSTILE = [b"scalar", b"- a\n- b\n", b"\x00\xff", b"a: [" * 3000, b"contexts: 5", b"contexts: [{name: [1]}]",
                b"current-context: [1]", b"&a [*a, *a]", b"current-context: c\ncontexts: [{name: c, context: 5}]",
                (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: "
                 b"[{name: k, cluster: {server: 'https://h\\e[2J:99999'}}]\n"), b"!!python/object:os.system x",
                b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(  # an alias bomb: 10^9 nodes in 300 bytes
                    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n".encode() for i in range(1, 9))]
PARQUET_HOSTILE = [b"PAR1", b"PAR1" + b"\x00" * 8 + b"PAR1", b"PAR1\x19\xf1" + b"\xff" * 8 + b"\x0f\x00"
                   + (12).to_bytes(4, "little") + b"PAR1", b"PAR1" + b"\x1c" * 4000 + (4000).to_bytes(4, "little")
                   + b"PAR1"]
TEMPLATES = [b"\xff", b"{{", b"", b"{% for m in messages %}{{ m.content }}\x1b[2J{% endfor %}",
             ("{{ '" + SECRET + "' }}").encode()]
MARKERS = [b"3", b"-1", b"x", b"3\x1b]0;x\x07", b"9" * 100, SECRET.encode()]
# target -> (paths under the case folder; each base names its own run) and what is written there
TARGETS: dict[str, tuple[str, ...]] = {
    "config.json": ("model/config.json",), "tokenizer_config.json": ("model/tokenizer_config.json",),
    "chat_template.jinja": ("model/chat_template.jinja",), "index": ("data/train.parquet",),
    "kubeconfig": ("kubeconfig",), "lock": ("out/logs/exp.lock", "out/logs/tiny-terminus.lock"),
    "marker": ("out/checkpoints/proj/exp/latest_checkpointed_iteration.txt",
               "out/checkpoints/embedded/tiny-terminus/latest_checkpointed_iteration.txt"),
    "metrics": ("out/logs/exp.jsonl", "out/logs/tiny-terminus.jsonl"),
    "summary": ("out/harbor_trials/proj/exp/step_1/summary.json",
                "out/harbor_trials/embedded/tiny-terminus/step_1/summary.json"),
}
HOSTILE = {"config.json": JSON_HOSTILE, "tokenizer_config.json": JSON_HOSTILE, "chat_template.jinja": TEMPLATES,
           "index": PARQUET_HOSTILE, "kubeconfig": YAML_HOSTILE, "lock": JSON_HOSTILE, "marker": MARKERS,
           "metrics": JSON_HOSTILE, "summary": JSON_HOSTILE}
SPECIAL_FILES = ("fifo", "zero_link", "null_link", "dir", "loop", "missing")


def _json_bytes(doc: object) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def content(draw, target: str):
    how = draw(st.sampled_from(["hostile", "json", "bytes"] + (["metadata"] if target == "index" else [])))
    if how == "hostile":
        return "bytes", draw(st.sampled_from(HOSTILE[target]))
    if how == "json":
        return "bytes", _json_bytes(draw(JSON_DOC))
    if how == "metadata":  # a real index whose rlkit.task_check metadata is generated
        return "metadata", _json_bytes(draw(JSON_DOC))
    return "bytes", draw(st.binary(max_size=300))


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["set", "set", "set", "line", "bytes", "delete", "dup", "secret_line", "secret_named",
                                 "site", "file", "file", "special", "output_dir"]))
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
    if kind == "secret_named":  # a credential under a name the schema does not know, in any case
        name = draw(st.sampled_from(["HF_TOKEN", "hf_token", "OPENAI_API_KEY", "github_token", "DB_PASSWORD"]))
        value = draw(st.sampled_from([SECRET, f"'{SECRET}'", f"{SECRET} x", f'"{SECRET}']))
        return kind, f"{name}={value}", draw(st.booleans()), None
    if kind == "output_dir":
        return kind, draw(st.sampled_from(OUTPUT_DIRS)), None, None
    target = draw(st.sampled_from(sorted(TARGETS)))
    if kind == "special":
        return kind, target, draw(st.sampled_from(SPECIAL_FILES)), None
    return kind, target, draw(content(target)), None


def _quote(value: str, how: str) -> str:
    return f"{how}{value}{how}" if how in ("'", '"') else value


def _place(path: Path, what: object) -> None:
    """Put `what` at `path`: bytes, a generated index, or a special file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "zero_link":
        path.symlink_to("/dev/zero")
    elif what == "null_link":
        path.symlink_to("/dev/null")
    elif what == "dir":
        path.mkdir()
    elif what == "loop":
        path.symlink_to(path)
    elif what == "missing":
        pass
    elif isinstance(what, tuple) and what[0] == "metadata":
        import pyarrow.parquet as pq

        from rlkit.tasks.schema import TASK_CHECK_KEY
        from tests.validate.helpers import write_index

        write_index(path)
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({TASK_CHECK_KEY.encode(): what[1]}), path)
    else:
        path.write_bytes(what[1] if isinstance(what, tuple) else what)  # type: ignore[arg-type]


def _apply(case: Path, base: str, site: str, mutations: list) -> tuple[bytes, bytes]:
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
        elif kind == "secret_named":
            (run_lines if b else site_lines).append(a)
        elif kind == "output_dir":
            run_lines.append(f"OUTPUT_DIR={a}" if "\x00" not in a else f'OUTPUT_DIR="{a}"')
        elif kind in ("file", "special"):
            TRIED["special files" if kind == "special" else "generated files"] += 1
            for rel in TARGETS[a]:
                _place(case / rel, b)
        # "bytes" mutations are spliced into the encoded text below
    text = ("\n".join(run_lines) + "\n").encode("utf-8", "surrogatepass")
    for kind, a, b, _ in mutations:
        if kind == "bytes":
            pos = b % (len(text) + 1)
            text = text[:pos] + a + text[pos:]
    return text, ("\n".join(site_lines) + "\n").encode("utf-8", "surrogatepass")


@pytest.fixture
def fuzz_base(ws) -> dict:
    """The two base configs (the test one and the shipped embedded default), each pointing at the case's
    own copies of the model, index, kube config and output folder (placeholders replaced per case)."""
    values = ws.run_values()
    values.update(MODEL_PATH="@CASE@/model", TRAIN_FILES="@CASE@/data/train.parquet",
                  VAL_FILES="@CASE@/data/val.parquet", OUTPUT_DIR="@CASE@/out")
    base = "".join(f"{k}={v}\n" for k, v in values.items())
    shipped = ((REPO / "examples" / "configs" / "embedded.env").read_text()
               .replace(".rlkit/models/tiny-qwen3-sft", "@CASE@/model")
               .replace(".rlkit/indexes/", "@CASE@/data/") + "OUTPUT_DIR=@CASE@/out\n")
    site = "".join(f"{k}={v}\n" for k, v in ws.site_values.items()) + "KUBECONFIG=@CASE@/kubeconfig\n"
    return {"ws": ws, "root": ws.root, "bases": [base, shipped], "site": site}


def _new_case(fuzz_base: dict) -> Path:
    ws, root = fuzz_base["ws"], fuzz_base["root"]
    case = Path(tempfile.mkdtemp(dir=root))
    (case / "model").mkdir()
    for f in ws.model_dir.iterdir():  # copies: the fuzzer overwrites them
        shutil.copy(f, case / "model" / f.name)
    (case / "kubeconfig").write_text("apiVersion: v1\nclusters: []\ncontexts: []\n")
    (case / "data").mkdir()
    shutil.copy(ws.train, case / "data" / "train.parquet")
    shutil.copy(ws.val, case / "data" / "val.parquet")
    return case


def _snapshot(case: Path) -> dict[Path, bytes]:
    """The content of every regular file under the case folder (special files are never opened)."""
    found = {}
    for dirpath, _, names in os.walk(case):
        for name in names:
            path = Path(dirpath) / name
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    found[path] = path.read_bytes()
            except OSError:
                continue
    return found


def _probe_stub(argv: list[str]) -> str:
    return '{"parser": "qwen3_coder", "ok": true, "detail": "stub", "parses": ["qwen3_coder"]}\n'


@contextmanager
def _in_folder(path: Path):
    """Relative paths and a project root of the case's own (nothing falls back to the repository)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def check_invariants(mode: str, rc: int, out: str) -> None:
    assert rc in (0, 1, 2), out[-3000:]
    TRIED[f"exit {rc}"] += 1
    for secret in SECRETS:
        assert secret not in out, f"a secret in the output of {mode}"
    bad = RAW_CONTROL.search(out)
    assert bad is None, f"raw control character {bad.group(0)!r}: {out[max(bad.start() - 120, 0):bad.end() + 40]!r}"
    assert "Traceback" not in out and "check crashed" not in out and "did not finish" not in out, out[-3000:]
    assert len(out) < OUTPUT_MAX
    for line in out.splitlines():
        if line.strip().startswith("✗ FATAL"):
            assert "(" in line or "[" in line or any(k in line for k in KEYS), line  # names a file:line or a key
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
@given(which=st.integers(0, 1), mutations=st.lists(mutation(), min_size=1, max_size=6),
       mode=st.sampled_from(MODES))
def test_every_command_on_mutated_configs_and_the_files_they_name(fuzz_base, which: int, mutations: list,
                                                                  mode: str) -> None:
    ws = fuzz_base["ws"]
    case = _new_case(fuzz_base)
    base = fuzz_base["bases"][which].replace("@CASE@", str(case))
    site = fuzz_base["site"].replace("@CASE@", str(case))
    run_text, site_text = _apply(case, base, site, mutations)
    (case / "run.env").write_bytes(run_text)
    (case / "site.env").write_bytes(site_text)
    env = {**ws.environ(), "RLKIT_SITE_ENV": str(case / "site.env"), "WANDB_API_KEY": SECRET, "HF_TOKEN": SECRET2,
           "HOME": str(case), **({"DRY_RUN": "1"} if mode == "dry_run" else {})}
    argv = {"check": ["check", "--quiet"], "context": ["check", "--context"], "dry_run": ["train"],
            "status": ["status"]}[mode] + [str(case / "run.env")]
    before = _snapshot(case)
    TRIED[mode] += 1
    with _in_folder(case), mock.patch("rlkit.validate.parser_probe.run_probe_subprocess", _probe_stub):
        rc, out = run_cli(argv, env)
    check_invariants(mode, rc, out)
    for path, data in _snapshot(case).items():
        if before.get(path) != data:  # written by the command
            assert not any(s.encode() in data for s in SECRETS), f"a secret written to {path}"


HOSTILE_CLI = [
    ("EXP_NAME=run-${WANDB_API_KEY}\nLOGGER=console,file,wandb\n", "", {}),
    (f"SCAFFOLD={'../' * 8}tmp/evil\nTRAIN_BSZ=2# prompts\nLR=nan\n", f"WANDB_API_KEY={SECRET} oops\n", {}),
    (f"MODEL_PATH=$(touch {MARKER})\nOUTPUT_DIR=`touch {MARKER}`\n", "PROXY_PORT=70000\nRAY_HEAD_ADDRESS=h\u00e9ad\n", {}),
    ("\ufeffPROJECT_NAME=p\fEXP_NAME=e\nTRAIN_BSZ=" + "9" * 4400 + "\n", "GPUS_PER_NODE=1073741824\n", {}),
    ("HARBOR_AGENT=x\nhf_token=" + SECRET2 + " x\n", "SCAFFOLD=cc\nSANDBOX_NETWORK=rl-net\n",
     {"model/config.json": "fifo", "out/logs/exp.lock": "zero_link"}),
    ("MAX_PROMPT=1000000\n", "", {"model/config.json": b'{"max_position_embeddings": -5}',
                                  "out/logs/exp.lock": b"[" * 100_000}),
]


@pytest.mark.parametrize(("extra_run", "extra_site", "files"), HOSTILE_CLI)
@pytest.mark.parametrize("mode", ["check", "context", "dry_run"])
def test_cli_subprocess_invariants(fuzz_base, extra_run: str, extra_site: str, files: dict, mode: str) -> None:
    """The same invariants on the real `rlkit` process (its own interpreter, streams and exit code)."""
    from tests.validate.test_hostile_configs import warm

    ws = fuzz_base["ws"]
    case = _new_case(fuzz_base)
    warm(ws)  # the parser probe's verdict, cached for the CLI runs (the probe imports verl: slow)
    for rel, what in files.items():
        _place(case / rel, what)
    (case / "run.env").write_text(fuzz_base["bases"][0].replace("@CASE@", str(case)) + extra_run)
    (case / "site.env").write_text(fuzz_base["site"].replace("@CASE@", str(case)) + extra_site)
    argv = {"check": ["check"], "context": ["check", "--context"], "dry_run": ["train"]}[mode] + [str(case / "run.env")]
    env = {"PATH": os.environ["PATH"], "HOME": str(case), **ws.environ(), "RLKIT_SITE_ENV": str(case / "site.env"),
           "WANDB_API_KEY": SECRET, "HF_TOKEN": SECRET2, **({"DRY_RUN": "1"} if mode == "dry_run" else {})}
    proc = subprocess.run([sys.executable, "-m", "rlkit.cli.main", *argv], capture_output=True, text=True,
                          cwd=case, env={**env, "PYTHONPATH": str(REPO)}, check=False,
                          timeout=300)  # a hang guard, not a speed test
    check_invariants(mode, proc.returncode, proc.stdout + proc.stderr)


@pytest.fixture(scope="module", autouse=True)
def _report_how_many_inputs_were_tried(request: pytest.FixtureRequest):
    """Prints, after this module's tests, how many inputs the fuzz tried (the long run's figure)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"fuzz inputs tried: {TRIED} (RLKIT_FUZZ_EXAMPLES={EXAMPLES}, seed {SEED_VALUE})")
