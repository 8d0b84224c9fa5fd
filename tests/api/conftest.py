"""A run workspace for API tests: site.env on the real docker daemon, a warm parser-probe verdict, no NVML."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.validate.helpers import Workspace

REPO = Path(__file__).resolve().parents[2]


def warm_probe_cache(ws: Workspace) -> None:
    """The parser probe's cached verdict for ws's tiny model + qwen3_coder (its subprocess is not what these test)."""
    from rlkit.validate.model import read_chat_template
    from rlkit.validate.parser_probe import cache_key

    key = cache_key(ws.model_dir, read_chat_template(ws.model_dir) or "", "qwen3_coder")
    folder = ws.cache / "parser_probe"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps({"parser": "qwen3_coder", "ok": True, "detail": "round-trips",
                                                    "parses": ["qwen3_coder"]}))


@pytest.fixture
def ws(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A workspace whose config has no FATAL finding once a docker daemon answers at DOCKER_HOST."""
    ws = Workspace(tmp_path, tiny_model_dir)
    for key, value in ws.environ().items():
        monkeypatch.setenv(key, value)
    for key in ("PREFLIGHT_ONLY", "DRY_RUN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the GPU check: skipped, as on any CPU box
    warm_probe_cache(ws)
    return ws


@pytest.fixture
def run_copy(tmp_path: Path):
    """copy("healthy") → a writable copy of a recorded run's folder (tests/monitor/fixtures/<name>)."""
    import shutil

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(REPO / "tests" / "monitor" / "fixtures" / name, dest)
        return dest

    return copy


@pytest.fixture
def docker_ws(ws: Workspace, dockerd: str) -> Workspace:
    """`ws` with DOCKER_HOST at the real docker daemon."""
    ws.write_site(DOCKER_HOST=f"unix://{dockerd}")
    return ws


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """`rlkit ARGV --json` in this process: its exit code and the one JSON object it printed."""
    from rlkit.cli.main import main

    capsys.readouterr()
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    return code, json.loads(lines[0])


def as_json(result: object) -> dict:
    """A result's `as_dict()` through JSON, as the CLI prints it."""
    return json.loads(json.dumps(result.as_dict(), default=str))  # type: ignore[attr-defined]


EXAMPLES = REPO / "examples" / "tasks"
TASKS = ["calc-power-unary", "merge-intervals"]


@pytest.fixture(scope="session")
def task_index(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task index of two bundled tasks, their images built (cached by docker across runs)."""
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks
    from rlkit.tasks.index import build_rows, write_index

    outcomes = build_task_images([t for t in discover_tasks(EXAMPLES) if t.task_id in TASKS])
    assert not [o for o in outcomes if o.status == "failed"], outcomes
    path = tmp_path_factory.mktemp("index") / "two.parquet"
    return write_index([r for r in build_rows(EXAMPLES, "train") if r.task_id in TASKS], path)
