"""`rlkit trial TASK_DIR --agent oracle|nop`: run one trial and print its reward."""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlkit trial", description="run one trial of a harbor task")
    parser.add_argument("task_dir", metavar="TASK_DIR")
    parser.add_argument("--agent", default="oracle",
                        help="oracle | nop | a harbor agent name | pkg.module:AgentClass (default oracle)")
    parser.add_argument("--trials-dir", default=None,
                        help="write the trial here (default harbor_trials/<project>/<exp>/step_<N>/)")
    parser.add_argument("--project", default="default")
    parser.add_argument("--experiment", default="default")
    parser.add_argument("--step", type=int, default=0)
    parser.add_argument("--backend", default="docker", help="sandbox backend: docker | k8s")
    parser.add_argument("--network", choices=["none", "bridge", "host"], default=None,
                        help="sandbox network (default from task.toml)")
    parser.add_argument("--agent-timeout", type=float, default=None, help="override [agent].timeout_sec")
    parser.add_argument("--verifier-timeout", type=float, default=None, help="override [verifier].timeout_sec")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    import asyncio
    from pathlib import Path

    from rlkit.rollout.trial import TrialSpec, run_trial

    env_kwargs = {"network": args.network} if args.network else {}
    spec = TrialSpec(task_dir=Path(args.task_dir), agent=args.agent, project=args.project,
                     experiment=args.experiment, step=args.step, backend=args.backend,
                     trials_dir=Path(args.trials_dir) if args.trials_dir else None, environment_kwargs=env_kwargs,
                     agent_timeout_sec=args.agent_timeout, verifier_timeout_sec=args.verifier_timeout)
    outcome = asyncio.run(run_trial(spec))
    if args.json:
        print(json.dumps(outcome.model_dump(mode="json"), indent=2))
    else:
        timings = " ".join(f"{k}={v:.2f}s" for k, v in outcome.timings.items())
        print(f"{outcome.task_id}  agent={args.agent}  reward={outcome.reward:g}  reason={outcome.reason}")
        print(f"  trial dir: {outcome.trial_dir}")
        print(f"  timings:   {timings}")
        if outcome.exception_type:
            first = (outcome.exception_message or "").strip().splitlines()[:1]
            print(f"  error:     {outcome.exception_type}: {first[0] if first else ''}", file=sys.stderr)
    return 0 if outcome.graded else 1
