"""Record teacher trajectories through the real scaffold, proxy and sandboxes.

Each train task runs one whole trial (docker sandbox, the scaffold's agent, the task's
tests) exactly as a rollout does, except that the proxy's upstream is the scripted
teacher instead of vLLM. The proxy's token record of each session becomes a
`TrialRecord`, the same type the RL trainer reads.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

from rlkit.config.schema import AgentApi
from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord

SERVED_NAME = "policy"


def build_images(task_dirs: list[Path], scaffold: str = "terminus", log: Callable[[str], None] = print) -> None:
    """The tasks' sandbox images, with the scaffold's agent baked in where it runs in the sandbox
    (cached by docker; only missing ones are built)."""
    from rlkit.errors import ImageError
    from rlkit.sandbox.images import build_task_images
    from rlkit.scaffolds.bake import scaffold_layer
    from rlkit.tasks.images import read_task_spec

    layer = scaffold_layer(scaffold, log=log)
    for outcome in build_task_images([read_task_spec(d) for d in task_dirs], layer=layer):
        if outcome.status in ("failed", "missing"):
            raise ImageError(f"image of {outcome.image} failed to build: {outcome.detail}")


def record_teacher(task_dirs: list[Path], model_dir: Path, trials_dir: Path, *, scaffold: str = "terminus",
                   samples: int = 1, max_concurrency: int = 2, max_turns: int = 4, max_model_len: int = 16384,
                   decoys: bool = False, log: Callable[[str], None] = print) -> list[TrialRecord]:
    """`samples` teacher trials per task; records in task order (failed trials included, with their reward).

    With `decoys`, a task's trials take its fixes in turn (the oracle, then `solution/decoys/*.sh`), so
    `samples` should be a multiple of the fixes a task has.

    Trials of one task differ where the sandbox does (the container's hostname in the shell
    prompt, the terminal's timing): several per task teach the policy to ignore that."""
    from rlkit.train._teacher import TeacherScript, TeacherServer

    build_images(task_dirs, scaffold, log=log)
    script = TeacherScript.from_task_dirs(task_dirs, decoys=decoys)
    with TeacherServer(model_dir, script, served_model_name=SERVED_NAME, max_model_len=max_model_len) as teacher:
        return run_scaffold_trials(task_dirs, model_dir, teacher.url, trials_dir, scaffold=scaffold,
                                   samples=samples, max_concurrency=max_concurrency, max_turns=max_turns,
                                   max_model_len=max_model_len, label="teacher", log=log)


def run_scaffold_trials(task_dirs: list[Path], model_dir: Path, upstream: str, trials_dir: Path, *,
                        scaffold: str = "terminus", samples: int = 1, max_concurrency: int = 2,
                        max_turns: int = 4, max_model_len: int = 16384, temperature: float = 1.0,
                        max_response_tokens: int | None = None, label: str = "trial",
                        log: Callable[[str], None] = print) -> list[TrialRecord]:
    """`samples` trials per task through the real proxy (upstream: vLLM or the teacher) and scaffold."""
    from rlkit.proxy import BackgroundProxy, ProxyConfig
    from rlkit.rollout.trial import TrialSpec, run_trials
    from rlkit.scaffolds import ScaffoldRun, get_scaffold

    adapter = get_scaffold(scaffold)
    config = ProxyConfig(model_path=str(model_dir), upstreams=[upstream], port=0, served_model_name=SERVED_NAME,
                         max_model_len=max_model_len, max_response_tokens=max_response_tokens,
                         max_response_tokens_per_session=max_model_len // 2,
                         warm_anthropic=adapter.api_format is AgentApi.ANTHROPIC)
    with BackgroundProxy(config) as proxy:
        specs = []
        for task_dir in task_dirs:
            for _ in range(samples):
                session = f"{label}-{task_dir.name[:40]}-{uuid.uuid4().hex[:6]}"
                run = ScaffoldRun(session=session, model=SERVED_NAME, proxy_url=proxy.url, max_turns=max_turns,
                                  temperature=temperature)
                specs.append(TrialSpec(task_dir=task_dir, trials_dir=trials_dir, session=session,
                                       **adapter.trial_fields(run, backend="docker")))
        outcomes = asyncio.run(run_trials(specs, max_concurrency=max_concurrency))
        records = []
        for spec, outcome in zip(specs, outcomes, strict=True):
            trajectory = proxy.trajectory(spec.session or "", calls="none") or {}
            segments = [TokenSegment.from_proxy(s) for s in trajectory.get("segments", [])]
            reason = Outcome(outcome.reason)
            records.append(TrialRecord(
                uid=outcome.task_id, task_id=outcome.task_id, session=outcome.session, outcome=reason,
                reward=outcome.reward, masked=reason.masked or not segments, segments=segments,
                num_turns=sum(s.num_turns for s in segments), num_breaks=max(0, len(segments) - 1),
                timings=outcome.timings, trial_dir=outcome.trial_dir,
                detail=f"{outcome.exception_type}: {outcome.exception_message}" if outcome.exception_type else None))
            log(f"  {label} {outcome.task_id}: reward {outcome.reward:g} ({reason.value}), "
                f"{sum(len(s.prompt_ids) + len(s.response_ids) for s in segments)} tokens, "
                f"{sum(sum(s.response_mask) for s in segments)} sampled")
    return records


def write_records(records: list[TrialRecord], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def read_records(path: Path) -> list[TrialRecord]:
    return [TrialRecord.model_validate(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
