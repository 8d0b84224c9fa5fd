"""The Claude Code plugin (.claude/commands/rl/*.md): frontmatter, allowed tools that cover what each
command runs, and those shell lines run against a sample run (the monitor's crashed-run fixture)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from rlkit.config import owner as O
from tests.validate.helpers import Workspace, free_port

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ROOT / ".claude" / "commands" / "rl"
FIXTURE = ROOT / "tests" / "monitor" / "fixtures" / "crashed"


def parse(path: Path) -> tuple[dict, str]:
    text = path.read_text()
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    assert match, f"{path.name}: no frontmatter"
    return yaml.safe_load(match.group(1)), match.group(2)


def shell_lines(body: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", body, re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def allowed_prefixes(meta: dict) -> list[str]:
    tools = [t.strip() for t in str(meta["allowed-tools"]).split(",")]
    return [m.group(1) for t in tools if (m := re.fullmatch(r"Bash\((.+):\*\)", t))]


@pytest.mark.parametrize("name", ["check", "run", "status", "dashboard"])
def test_frontmatter_and_allowed_tools_cover_the_body(name: str) -> None:
    meta, body = parse(COMMANDS / f"{name}.md")
    assert meta["description"] and "argument-hint" in meta and "$ARGUMENTS" in body
    prefixes = allowed_prefixes(meta)
    assert prefixes and all(p.startswith("rlkit ") for p in prefixes)  # only rlkit commands, nothing broad
    assert not any(t.strip() == "Bash" or t.strip().startswith("Bash(*") for t in meta["allowed-tools"].split(","))
    lines = shell_lines(body)
    assert lines, f"{name}.md runs no command"
    for line in lines:
        assert any(line.startswith(p) for p in prefixes), f"{name}.md runs {line!r}, not allowed by {prefixes}"
    assert meta.get("disable-model-invocation") is (True if name == "run" else None)


@pytest.fixture
def sample(tmp_path: Path, tiny_model_dir: Path) -> tuple[Path, dict[str, str]]:
    """A run config whose OUTPUT_DIR holds the monitor's recorded crashed run (embedded/fx-crash)."""
    ws = Workspace(tmp_path, tiny_model_dir)
    shutil.copytree(FIXTURE, tmp_path / "out")
    config = ws.config(PROJECT_NAME="embedded", EXP_NAME="fx-crash")
    env = {**os.environ, **ws.environ(), "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    return config, env


def _run(name: str, args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    [line] = shell_lines(parse(COMMANDS / f"{name}.md")[1])
    return subprocess.run(["bash", "-c", line.replace("$ARGUMENTS", args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_check_status_and_run_against_a_sample_run(sample) -> None:
    config, env = sample
    check = _run("check", str(config), env)
    assert check.returncode in (0, 1), check.stderr
    assert "run_in_flight" in check.stdout and "gpu_ownership" in check.stdout and "✓" in check.stdout

    status = _run("status", str(config), env)
    assert status.returncode == 0, status.stderr
    assert "fx-crash" in status.stdout

    # a live lock for the same run: /rl:run refuses and starts nothing
    lock = config.parent / "out" / "logs" / "fx-crash.lock"
    now = dt.datetime.now(dt.UTC).isoformat()
    lock.write_text(json.dumps({"pid": os.getpid(), "host": O.host(), "user": O.me(), "heartbeat": now,
                                "started": now, "exp": "fx-crash", "project": "embedded"}))
    run = _run("run", str(config), env)
    assert run.returncode == 1 and "not started" in run.stdout and "fx-crash is already running" in run.stdout
    assert not list(lock.parent.glob("train_*.out"))


def test_dashboard_line_serves_the_sample_run(sample) -> None:
    config, env = sample
    port = free_port()
    [line] = shell_lines(parse(COMMANDS / "dashboard.md")[1])
    proc = subprocess.Popen(["bash", "-c", "exec " + line.replace("$ARGUMENTS", f"{config} --port {port}")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith(f"rlkit dashboard on http://127.0.0.1:{port}/"), first
        import httpx

        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                import time

                time.sleep(0.1)
        else:
            raise AssertionError("dashboard did not answer")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
