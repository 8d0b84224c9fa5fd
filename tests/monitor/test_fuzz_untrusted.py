"""Property-based fuzzing of what rlkit reads that people other than the user wrote (issue 48): a run's
outputs (`rlkit status`, the dashboard), third-party task folders (`rlkit index build`, the task reader and
tasks check's folder check) and model folders (the model-folder checks `rlkit eval` runs), with the
invariants of the config fuzz (tests/validate/test_fuzz_preflight.py).

Inputs: the recorded crashed run (tests/monitor/fixtures/crashed), a bundled task and the tiny model, each
mutated: generated lines and documents (numbers past every bound, 400- and 5000-digit integers, nesting
100,000 deep, terminal escapes, the secrets, torn lines longer than the line bound), and special files in
place of any of their files: a FIFO, a link to /dev/zero, a directory, a symlink loop, a link to a file
outside the folder that holds a marker, a step folder linked to an outside folder.

Invariants, asserted for every case:
  - no traceback: no exception escapes the command or the reader; exit 0, 1 or 2; no HTTP 500;
  - no hang past a bound: each call finishes within a thread's bound (and hypothesis' deadline);
  - strict JSON: `rlkit status --json` and every dashboard answer parse without NaN / Infinity;
  - no file from outside its root: the outside marker never appears in output, an answer or the index;
  - no secret in any output or answer, and no raw control character;
  - nothing executed: the marker `$(...)` / backticks would create never appears.

CI runs RLKIT_FUZZ_EXAMPLES examples per property (default 40) with a fixed seed; a longer run:
RLKIT_FUZZ_EXAMPLES=2000 RLKIT_FUZZ_SEED=random pytest -s tests/monitor/test_fuzz_untrusted.py
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.validate.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "monitor" / "fixtures" / "crashed"
TASK = REPO / "examples" / "tasks" / "merge-intervals"
EXP = "fx-crash"
TRIALS = Path("harbor_trials") / "embedded" / EXP
TRIAL = TRIALS / "step_1" / "word-frequency__933cda1f"
EXAMPLES = int(os.environ.get("RLKIT_FUZZ_EXAMPLES", "40"))
SEED = os.environ.get("RLKIT_FUZZ_SEED", "4848")
SEED_VALUE = random.getrandbits(32) if SEED == "random" else int(SEED)
SECRET = "hf_Fz4Kq8Lm2Np6Rt1Vx5Bc9Dw3"  # HF_TOKEN of the environment: masked by its name
OUTSIDE = "OUTSIDE-MARKER-7f3a91"  # what a file outside every root holds
EXECUTED = Path(tempfile.gettempdir()) / f"rlkit-fuzz48-executed-{uuid.uuid4().hex}"
LINE_BOUND = 4096  # tail.MAX_LINE for the fuzz: torn lines past it cost kilobytes, not megabytes
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ESCAPES = ["\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\u202e", "\r"]
TRIED: dict[str, int] = {"run outputs": 0, "task folders": 0, "model folders": 0, "special files": 0,
                         "status exit 0": 0, "status exit 1/2": 0, "answers": 0, "refused tasks": 0,
                         "fatal model folders": 0}
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=120), database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])

NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "1" * 400, "9" * 5000, "1e308", "-0", "1.2.3", "0x10", "true",
           '"3"', "[]", "{}", "null", "4294967297", "-5", "3.5"]
TEXTS = [*ESCAPES, SECRET, f"x {SECRET} y", f"$(touch {EXECUTED})", f"`touch {EXECUTED}`", "\ufeff", "\x00",
         "a" * 300, "../../etc/passwd", "step:" + "7" * 5000 + " - x:1"]
SCALARS = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(TEXTS).map(json.dumps),
                    st.integers(-(10**30), 10**30).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))
KEYS = ["step", "data", "event", "attempt", "from_step", "total_steps", "pid", "time", "trials", "outcomes",
        "sessions", "session", "reward", "masked", "pass_rate", "reward_mean", "timing_s/step", "critic/rewards/mean",
        "heartbeat", "host", "phase", "project", "steps", "message", "observation", "tool_calls", "source",
        "max_position_embeddings", "chat_template", "text_config", "timing_s", SECRET]


@st.composite
def json_text(draw, depth: int = 0) -> str:
    """Loose JSON text: values of every kind, keys rlkit reads, sometimes invalid or nested past every bound."""
    how = draw(st.integers(0, 9))
    if how == 0:
        n = draw(st.sampled_from([70, 100_000]))
        return "[" * n + "]" * n
    if how <= 2 or depth > 2:
        return draw(SCALARS)
    if how <= 4:
        return "[" + ", ".join(draw(st.lists(json_text(depth + 1), max_size=4))) + "]"
    items = draw(st.lists(st.tuples(st.sampled_from(KEYS), json_text(depth + 1)), max_size=6))
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in items) + "}"


@st.composite
def log_line(draw) -> str:
    kind = draw(st.sampled_from(["json", "marker", "console", "vllm", "text", "torn"]))
    if kind == "json":
        return draw(json_text())
    if kind == "marker":
        fields = draw(st.lists(st.tuples(st.sampled_from(["attempt", "from_step", "total_steps", "pid", "time"]),
                                         json_text(2)), max_size=5))
        body = ", ".join(f'"{k}": {v}' for k, v in fields)
        return draw(st.sampled_from(["", "[rlkit] attempt "])) + '{"event": "attempt"' + (", " if body else "") + \
            body + "}"
    if kind == "console":
        step = draw(st.sampled_from(["1", "2", "9" * 5000, "-1", "1e9"]))
        value = draw(st.sampled_from(NUMBERS + ["np.float64(0.5)", "tensor(1e999)", SECRET, ESCAPES[0]]))
        return f"(TaskRunner pid=1) step:{step} - timing_s/step:{value} - critic/rewards/mean:{value}"
    if kind == "vllm":
        n = draw(st.sampled_from(NUMBERS + ["12.5"]))
        return (f"INFO 11-30 14:45:59 [loggers.py:335] Engine 000: Avg prompt throughput: {n} tokens/s, Avg "
                f"generation throughput: {n} tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: {n}%")
    if kind == "torn":
        return '{"event": "attempt", "x": "' + "z" * draw(st.sampled_from([LINE_BOUND + 1, 3 * LINE_BOUND]))
    return draw(st.sampled_from(TEXTS))


SPECIALS = ("fifo", "zero_link", "dir", "loop", "outside_link")
RUN_FILES = [f"logs/{EXP}.jsonl", f"logs/{EXP}.log", f"logs/{EXP}_attempts.jsonl", f"logs/{EXP}_vllm.log",
             f"logs/{EXP}_reaper.log", f"logs/{EXP}.lock", str(TRIALS / "step_1" / "summary.json"),
             str(TRIAL / "verifier" / "test-stdout.txt"), str(TRIAL / "verifier" / "reward.txt"),
             str(TRIAL / "exception.txt"), str(TRIAL / "agent" / "trajectory.json")]


def _place(path: Path, what: object, outside: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "zero_link":
        path.symlink_to("/dev/zero")
    elif what == "dir":
        path.mkdir()
    elif what == "loop":
        path.symlink_to(path)
    elif what == "outside_link":
        path.symlink_to(outside / "secret.txt")
    elif what == "outside_dir":
        path.symlink_to(outside)
    else:
        path.write_bytes(what if isinstance(what, bytes) else str(what).encode("utf-8", "surrogatepass"))


@st.composite
def run_mutation(draw):
    target = draw(st.sampled_from([*RUN_FILES, str(TRIALS / "step_7"), str(TRIALS / "step_1" / "linked__1")]))
    if target.endswith(("step_7", "linked__1")):
        return target, "outside_dir"
    how = draw(st.sampled_from(["append", "append", "replace", "special"]))
    if how == "special":
        return target, draw(st.sampled_from(SPECIALS))
    lines = draw(st.lists(log_line(), min_size=1, max_size=4))
    return target, (how, "\n".join(lines) + draw(st.sampled_from(["\n", ""])))


@pytest.fixture
def cases(tmp_path_factory):
    """A new case folder per example, removed after it (a long run would otherwise fill the disk)."""
    made: list[Path] = []

    def new() -> Path:
        for old in made:
            shutil.rmtree(old, ignore_errors=True)
        made.clear()
        made.append(Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp())))
        return made[-1]

    yield new
    for old in made:
        shutil.rmtree(old, ignore_errors=True)


def _bounded(fn, *args, limit: float = 60.0):
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"{fn} blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _clean_text(text: str, what: str) -> None:
    assert SECRET not in text, f"a secret in {what}"
    assert OUTSIDE not in text, f"a file from outside its root in {what}"
    bad = RAW_CONTROL.search(text)
    assert bad is None, f"raw control character {bad.group(0)!r} in {what}: {text[max(bad.start() - 80, 0):bad.end() + 20]!r}"
    assert "Traceback" not in text, text[-3000:]
    assert not EXECUTED.exists(), "something was executed"


def _strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def env_secret():
    from rlkit.config import secrets
    from rlkit.monitor import metrics, tail

    with mock.patch.dict(os.environ, {"HF_TOKEN": SECRET}), mock.patch.object(tail, "MAX_LINE", LINE_BOUND), \
            mock.patch.object(metrics, "MAX_LINE", LINE_BOUND):
        secrets._environment = None  # re-read the environment: HF_TOKEN is a secret of this process
        yield
    secrets._environment = None


def _outside(root: Path) -> Path:
    outside = root / "outside"
    (outside / "step_3" / "stolen__1").mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(f"{OUTSIDE} root:x:0:0\n")
    (outside / "step_3" / "stolen__1" / "exception.txt").write_text(OUTSIDE)
    return outside


@seed(SEED_VALUE)
@FUZZ
@given(mutations=st.lists(run_mutation(), min_size=1, max_size=5))
def test_status_and_dashboard_on_mutated_run_outputs(env_secret, cases, mutations: list) -> None:
    from fastapi.testclient import TestClient

    from rlkit.monitor.dashboard import create_app

    case = cases()
    root = case / "run"
    shutil.copytree(FIXTURE, root)
    outside = _outside(case)
    for target, what in mutations:
        path = root / target
        if isinstance(what, tuple):
            how, text = what
            if how == "append" and path.is_file() and not path.is_symlink():
                with path.open("a", encoding="utf-8", errors="surrogatepass") as f:
                    f.write(text)
                continue
            what = text
        else:
            TRIED["special files"] += 1
        _place(path, what, outside)
    TRIED["run outputs"] += 1
    rc, out = run_cli(["status", EXP, "--root", str(root), "--json"], {"HF_TOKEN": SECRET}, timeout_s=60)
    assert rc in (0, 1, 2), out[-3000:]
    TRIED["status exit 0" if rc == 0 else "status exit 1/2"] += 1
    _clean_text(out, "rlkit status --json")
    if rc == 0:
        _strict_json(out)
    client = TestClient(create_app(root), client=("127.0.0.1", 50000), base_url="http://127.0.0.1:8090")
    urls = ["/api/runs", f"/api/runs/{EXP}/metrics", f"/api/runs/{EXP}/vllm", f"/api/runs/{EXP}/status",
            f"/api/runs/{EXP}/steps", f"/api/runs/{EXP}/steps/1/trials", f"/api/runs/{EXP}/steps/7/trials",
            f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f",
            f"/api/runs/{EXP}/steps/1/trials/word-frequency__933cda1f/trajectory.json",
            f"/api/runs/{EXP}/steps/1/trials/linked__1", f"/api/runs/{EXP}/steps/7/trials/stolen__1"]
    for url in urls:
        response = _bounded(client.get, url)
        TRIED["answers"] += 1
        assert response.status_code in (200, 400, 404), (url, response.status_code, response.text[-2000:])
        _clean_text(response.text, url)
        _strict_json(response.text)


TASK_FILES = ["instruction.md", "task.toml", "solution/solve.sh", "tests/test.sh", "environment/Dockerfile",
              "environment/app/extra.py", "tests/data.bin", "solution/helper"]


@st.composite
def task_mutation(draw):
    target = draw(st.sampled_from(TASK_FILES))
    how = draw(st.sampled_from(["special", "text", "timeout", "sparse"]))
    if how == "special":
        return target, draw(st.sampled_from(SPECIALS))
    if how == "sparse":
        return target, "sparse"
    if how == "timeout":
        table = draw(st.sampled_from(["agent", "verifier", "environment"]))
        key = "cpus" if table == "environment" else "timeout_sec"
        return "task.toml", ("timeout", table, key, draw(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e300",
                                                                           '"x"', "[]", "600.0", "9" * 400])))
    return target, draw(st.sampled_from(TEXTS)) + draw(json_text())


def _apply_task(task: Path, mutations: list, outside: Path) -> None:
    for target, what in mutations:
        path = task / target
        if isinstance(what, tuple):
            _, table, key, value = what
            small = path.is_file() and not path.is_symlink() and path.stat().st_size < 2**20  # never a sparse 3 GB
            text = path.read_text(errors="replace") if small else 'version = "1.0"\n'
            lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key} =")] if f"[{table}]" in text else \
                [*text.splitlines(), f"[{table}]"]
            at = lines.index(f"[{table}]") + 1
            lines.insert(at, f"{key} = {value}")
            _place(path, "\n".join(lines) + "\n", outside)
        elif what == "sparse":
            _place(path, b"", outside)
            with path.open("r+b") as f:
                f.truncate(3 * 2**30)
        else:
            if what in SPECIALS:
                TRIED["special files"] += 1
            _place(path, what, outside)


@seed(SEED_VALUE)
@FUZZ
@given(mutations=st.lists(task_mutation(), min_size=1, max_size=4))
def test_index_build_and_the_task_reader_on_mutated_task_folders(env_secret, cases, mutations) -> None:
    from rlkit.errors import UserError
    from rlkit.tasks.task import folder_problem, load_task

    case = cases()
    task = case / "tasks" / "merge-intervals"
    shutil.copytree(TASK, task)
    outside = _outside(case)
    _apply_task(task, mutations, outside)
    TRIED["task folders"] += 1
    problem = _bounded(folder_problem, task)
    if problem is not None:
        _clean_text(problem, "the task folder's problem")
    try:
        info = _bounded(load_task, task)
    except UserError as exc:
        TRIED["refused tasks"] += 1
        _clean_text(str(exc), "the task reader's error")
    else:
        assert problem is None
        assert OUTSIDE not in info.instruction
    index = case / "index.parquet"
    rc, out = run_cli(["index", "build", str(task.parent), "-o", str(index)], {"HF_TOKEN": SECRET}, timeout_s=60)
    assert rc in (0, 1, 2), out[-3000:]
    _clean_text(out, "rlkit index build")
    if index.exists():
        assert OUTSIDE.encode() not in index.read_bytes()


MODEL_FILES = ["config.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer.json", "generation_config.json"]


@st.composite
def model_mutation(draw):
    target = draw(st.sampled_from(MODEL_FILES))
    if draw(st.booleans()):
        return target, draw(st.sampled_from(SPECIALS))
    return target, draw(json_text()) if target.endswith(".json") else draw(st.sampled_from(TEXTS))


@seed(SEED_VALUE)
@FUZZ
@given(mutations=st.lists(model_mutation(), min_size=1, max_size=4))
def test_the_model_folder_checks_on_mutated_model_folders(env_secret, tiny_model_dir, cases, mutations) -> None:
    from rlkit.validate.findings import Status
    from rlkit.validate.model_folder import check_model_folder

    case = cases()
    model = case / "model"
    shutil.copytree(tiny_model_dir, model)
    outside = _outside(case)
    for target, what in mutations:
        if what in SPECIALS:
            TRIED["special files"] += 1
        _place(model / target, what, outside)
    TRIED["model folders"] += 1
    verdict = '{"parser": "qwen3_coder", "ok": true, "parses": ["qwen3_coder"]}\n'  # the probe: its own tests
    findings = _bounded(lambda: check_model_folder(model, "qwen3_coder", cache_dir=case / "cache",
                                                   probe_runner=lambda argv: verdict))
    TRIED["fatal model folders"] += any(f.status is Status.FATAL for f in findings)
    for f in findings:
        _clean_text(f.render(), "a model-folder finding")


@pytest.fixture(scope="module", autouse=True)
def _report_how_many_inputs_were_tried(request: pytest.FixtureRequest):
    """Prints, after this module's tests, how many inputs the fuzz tried (the long run's figure)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"fuzz inputs tried: {TRIED} (RLKIT_FUZZ_EXAMPLES={EXAMPLES}, seed {SEED_VALUE})")
