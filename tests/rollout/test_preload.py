"""`rlkit.rollout.engine.preload`: after it, a process's first harbor `Trial` imports nothing heavy.

The imports inside harbor's `Trial` constructor are synchronous; in a process's first trial they stall
every trial on the event loop (seen 66-85 s on a loaded 2-core machine). The local trainer's rollout
worker preloads them while vLLM boots. In a fresh interpreter the test preloads each scaffold in turn
(terminus, cc, oc, ohsdk, on the docker backend), builds its first real Trial, and lists the modules the
constructor still imported: none of harbor's agents, litellm, the docker SDK or rlkit's sandbox. Without the
preload the same constructor imports ~2,800 modules (terminus; 10-19 s on a loaded machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "merge-intervals"

FIRST_TRIAL = r"""
import asyncio, json, sys, time
from pathlib import Path
from rlkit.rollout.engine import EngineConfig, RolloutEngine, preload
from rlkit.rollout.trial import trial_config
from rlkit.tasks.index import IndexRow

task, out, do_preload, scaffolds = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
row = IndexRow(task_id="merge-intervals", task_source=task, image="rlkit-task/merge-intervals:latest",
               split="train")
for scaffold in scaffolds:  # each one's preload, then its first Trial
    preload_s = preload(scaffold, "docker") if do_preload else None
    engine = RolloutEngine(EngineConfig(scaffold=scaffold, model_name="policy", proxy_url="http://127.0.0.1:9",
                                        trials_root=out))
    config = trial_config(engine.trial_spec(row, f"first-{scaffold}", 1), f"first-{scaffold}")
    from harbor.trial.trial import Trial

    before = set(sys.modules)
    started = time.perf_counter()
    asyncio.run(Trial.create(config))
    print(json.dumps({"scaffold": scaffold, "preload_s": preload_s, "create_s": time.perf_counter() - started,
                      "new": sorted(set(sys.modules) - before)}))
"""
HEAVY = ("litellm", "docker", "harbor.agents", "rlkit.sandbox", "rlkit.scaffolds", "openai", "tiktoken")
LAZY = ("litellm.llms.",)  # litellm's per-provider modules, loaded by the model name's prefix (a few ms)


def first_trials(scaffolds: list[str], tmp_path: Path, *, preloaded: bool) -> list[dict]:
    """In one fresh interpreter, for each scaffold in turn: its preload (or none), then its first Trial."""
    done = subprocess.run([sys.executable, "-c", FIRST_TRIAL, str(TASK), str(tmp_path), "1" if preloaded else "0",
                           *scaffolds], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if (m in HEAVY or m.startswith(tuple(f"{h}." for h in HEAVY)))
            and not m.startswith(LAZY)]


def test_after_a_preload_the_first_trial_of_every_scaffold_imports_nothing_heavy(tmp_path: Path) -> None:
    scaffolds = ["terminus", "cc", "oc", "ohsdk"]
    trials = first_trials(scaffolds, tmp_path, preloaded=True)
    assert [t["scaffold"] for t in trials] == scaffolds
    for trial in trials:
        assert heavy(trial["new"]) == [], (trial["scaffold"], trial["new"])
        assert len(trial["new"]) < 50, (trial["scaffold"], trial["new"])  # without the preload: ~2,800
        print(f"\n{trial['scaffold']}: preload {trial['preload_s']:.2f}s, first Trial.create "
              f"{trial['create_s']:.2f}s ({len(trial['new'])} modules)")


def test_a_rollout_worker_whose_preload_fails_still_starts_and_leaves_it_to_the_trials() -> None:
    """A preload that raises (here: an unknown scaffold) is logged; the trials import again and report it."""
    import asyncio

    from rlkit.rollout.engine import EngineConfig
    from rlkit.train.actors import RolloutWorker

    worker = RolloutWorker("no-such-scaffold", "docker")
    assert worker.preload_s is None and worker.engine is None
    config = EngineConfig(model_name="policy", proxy_url="http://127.0.0.1:9").model_dump(mode="json")
    assert asyncio.run(worker.configure(config)) is None
    assert worker.engine is not None and worker.val_engine is None
