"""`rlkit check`, `train.sh` switches and `rlkit.check` end to end, plus the import budget of the check path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlkit
from rlkit.validate.findings import Status

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "ray", "verl", "vllm", "transformers", "litellm", "docker", "kubernetes", "tensordict",
         "pyarrow", "numpy")


@pytest.fixture
def warm_cache(ws, tmp_path: Path) -> Path:
    """A parser-probe cache already holding the verdict for ws's tiny model + qwen3_coder."""
    from rlkit.validate.model import read_chat_template
    from rlkit.validate.parser_probe import cache_key

    key = cache_key(ws.model_dir, read_chat_template(ws.model_dir) or "", "qwen3_coder")
    d = ws.cache / "parser_probe"
    d.mkdir(parents=True)
    (d / f"{key}.json").write_text(json.dumps({"parser": "qwen3_coder", "ok": True, "detail": "round-trips",
                                               "parses": ["qwen3_coder"]}))
    return ws.cache


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env})


def test_python_api_returns_the_report(ws, warm_cache: Path) -> None:
    report = rlkit.check(str(ws.config()), environ=ws.environ())
    non_ok = [f.render() for f in report.findings if f.status not in (Status.OK, Status.SKIP)]
    assert non_ok == ["✗ FATAL backend: docker daemon not reachable at unix://" + str(ws.root / "no-docker.sock")
                      + " (FileNotFoundError: No such file or directory) (" + report.resolved.where("BACKEND")
                      + ")\n      fix: start it (sudo dockerd &, or systemctl start docker), or set DOCKER_HOST"]
    assert not report.ok


def test_preflight_only_prints_block_and_assertions_and_exits_nonzero_on_fatal(ws, warm_cache: Path) -> None:
    proc = run(["bash", "scripts/train/train.sh", str(ws.config())], {"PREFLIGHT_ONLY": "1", **ws.environ()})
    assert proc.returncode == 1
    assert "Run configuration" in proc.stdout and "Run Validation" in proc.stdout
    assert "✓ tool_call_parser" in proc.stdout and "✗ FATAL backend" in proc.stdout
    assert re.search(r"PREFLIGHT_ONLY {2,}= 1", proc.stdout) and "[process environment]" in proc.stdout
    assert "ray start" not in proc.stdout  # launches nothing, prints no plan


def test_check_cli_exit_codes(ws, warm_cache: Path) -> None:
    ws.write_site(BACKEND="docker")  # a site key the run layer also allows: no warning
    ok = run([sys.executable, "-m", "rlkit.cli.main", "check", "--quiet", str(ws.config())],
             {**ws.environ(), "DOCKER_HOST": "tcp://127.0.0.1:1"})
    assert ok.returncode == 1 and "✗ FATAL backend" in ok.stdout
    missing = run([sys.executable, "-m", "rlkit.cli.main", "check", str(ws.root / "nope.env")], ws.environ())
    assert missing.returncode == 2 and missing.stderr.startswith("✗ FATAL config file not found")
    assert "Traceback" not in missing.stderr


def test_full_run_preflights_then_exits_3(ws, warm_cache: Path) -> None:
    from tests.validate.helpers import FakeDockerDaemon

    sock = ws.root / "d.sock"
    ws.write_site(DOCKER_HOST=f"unix://{sock}")
    with FakeDockerDaemon(sock):
        proc = run(["bash", "scripts/train/train.sh", str(ws.config())], ws.environ())
    # Preflight passes; the verl launch then refuses a machine without NVIDIA GPUs before starting anything.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "0 ✗ FATAL" in proc.stdout and "this machine has none" in proc.stderr


def test_dry_run_stops_on_static_fatal(ws) -> None:
    proc = run(["bash", "scripts/train/train.sh", str(ws.config(NNODES=5))], {"DRY_RUN": "1", **ws.environ()})
    assert proc.returncode == 1 and "✗ FATAL topology" in proc.stdout and "main_ppo" not in proc.stdout


def test_check_path_imports_nothing_heavy(ws, warm_cache: Path) -> None:
    code = ("import sys, rlkit; r = rlkit.check(sys.argv[1]); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})), len(r.by_check('data_files')))")
    proc = run([sys.executable, "-c", code, str(ws.config())], ws.environ())
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "rlkit" in loaded and "2" in loaded  # the checks really ran, data files included
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)
