"""Teacher trajectories through the real stack: Terminus-2 on the host, tmux in a docker
sandbox, the real proxy, the task's own tests. No vLLM: the teacher is the upstream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "word-frequency"


def test_teacher_trajectory_passes_and_is_recorded(base_image: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    from rlkit.rollout.records import Outcome
    from rlkit.train._record import record_teacher

    [record] = record_teacher([TASK], tiny_model_dir, tmp_path, log=lambda _m: None)
    assert record.reward == 1.0 and record.outcome is Outcome.PASSED, record.detail
    assert record.trainable and (record.num_turns, record.num_breaks) == (2, 0)  # fix, then confirm
    [segment] = record.segments
    mask = segment.response_mask
    assert mask[0] == 1 and mask[-1] == 1 and 0 in mask  # terminal output between the two replies
    assert set(segment.response_logprobs) == {0.0}
    # harbor's own record of the trial holds the same completions the proxy recorded
    steps = json.loads((record.trial_dir / "agent" / "trajectory.json").read_text())["steps"]
    completions = [s["metrics"]["completion_token_ids"] for s in steps if s["source"] == "agent"]
    sampled = [t for t, m in zip(segment.response_ids, mask, strict=True) if m]
    assert [t for ids in completions for t in ids] == sampled


@pytest.mark.slow
def test_ensure_sft_model_builds_once_then_reads_the_cache(base_image: str, tiny_model_dir: Path,
                                                           tmp_path: Path) -> None:
    import shutil

    from rlkit.train.sft import MARKER, SftSettings, ensure_sft_model

    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / TASK.name)
    settings = SftSettings(epochs=2)
    first = ensure_sft_model(tiny_model_dir, tasks, root=tmp_path / "models", settings=settings, val_fraction=0.0,
                             log=lambda _m: None)
    assert not first.cached and first.teacher_rewards == {TASK.name: 1.0}
    assert first.model_dir.parent == tmp_path / "models" and first.model_dir.name.startswith("sft-")
    assert (first.model_dir / MARKER).is_file() and (first.model_dir / "chat_template.jinja").is_file()
    again = ensure_sft_model(tiny_model_dir, tasks, root=tmp_path / "models", settings=settings, val_fraction=0.0,
                             log=lambda _m: None)
    assert again.cached and again.model_dir == first.model_dir and again.losses == first.losses


@pytest.mark.slow
def test_teacher_calls_opencodes_shell_tool_and_passes(base_image: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """Under a tool-calling scaffold the teacher's fix goes through the agent's own shell tool
    (OpenCode's `bash`, baked into the sandbox image): the call parses, runs, and the tests pass."""
    from rlkit.rollout.records import Outcome
    from rlkit.train._record import record_teacher

    [record] = record_teacher([TASK], tiny_model_dir, tmp_path, scaffold="oc", log=lambda _m: None)
    assert record.reward == 1.0 and record.outcome is Outcome.PASSED, record.detail
    assert record.trainable and (record.num_turns, record.num_breaks) == (2, 0)  # the call, then the answer
    [segment] = record.segments
    assert 0 in segment.response_mask  # the tool's output between the two replies
    steps = json.loads((record.trial_dir / "agent" / "trajectory.json").read_text())["steps"]
    first, last = [s for s in steps if s["source"] == "agent"]
    [call] = first["tool_calls"]
    assert call["function_name"] == "bash" and "git apply" in call["arguments"]["command"]
    assert not first["extra"]["parse_failure"] and not last.get("tool_calls") and last["message"]
