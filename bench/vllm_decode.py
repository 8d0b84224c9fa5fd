"""vLLM-CPU decode beside busy cores: the launcher's OpenMP settings against vLLM's own.

A rollout keeps the cores that vLLM does not use busy (sandboxes, verifiers, the agents).
This boots the tiny policy on vLLM-CPU twice, as `rlkit.launch.vllm.VllmServer` starts it,
and streams C completions at once (prompt token ids, logprobs, as the proxy asks) while B
processes spin on the CPU, for R rounds:
  * launcher: `OMP_NUM_THREADS` = the cores less one and `OMP_WAIT_POLICY=PASSIVE` (the default);
  * floor: vLLM's own in-process default, both variables unset (torch keeps every core's
    OpenMP threads, which spin between the steps' small ops).
Prints tokens/s and the engine core's CPU seconds for each, and the ratio.

    python bench/vllm_decode.py [--busy 1] [--streams 8] [--rounds 3] [--max-tokens 350]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = ROOT / ".rlkit" / "cache" / "models" / "tiny-qwen3-coder"
OPENMP_KEYS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")


def _server_class(launcher: bool) -> type:
    from rlkit.launch.vllm import VllmServer

    if launcher:
        return VllmServer

    class VllmOwnThreads(VllmServer):
        def _env(self) -> dict[str, str]:
            env = super()._env()
            for key in OPENMP_KEYS:
                env.pop(key, None)
            return env

    return VllmOwnThreads


async def _stream(client: object, url: str, model: str, prompt: list[int], max_tokens: int) -> int:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "logprobs": 0, "return_token_ids": True, "temperature": 1.0}
    tokens = 0
    async with client.stream("POST", url + "/v1/completions", json=body, timeout=600) as response:  # type: ignore[attr-defined]
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                tokens += len(json.loads(line[6:])["choices"][0].get("token_ids") or [])
    return tokens


def _measure(launcher: bool, model_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    import httpx
    import psutil

    from rlkit.launch.vllm import VllmServerConfig

    work = Path(tempfile.mkdtemp(prefix="rlkb-"))
    config = VllmServerConfig(model_path=str(model_dir), exp_name="decode", max_model_len=8192,
                              log_dir=work / "logs", scratch_dir=work / "s")
    with _server_class(launcher)(config) as server:
        engine = psutil.Process(server.process.pid).children(recursive=True)

        def cpu() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in engine if p.is_running())

        async def rounds() -> tuple[int, float, float]:
            async with httpx.AsyncClient(trust_env=False) as client:
                await _stream(client, server.base_url, server.model_name, list(range(50, 1250)), 16)  # warm-up
                cpu0, started, tokens = cpu(), time.perf_counter(), 0
                for r in range(args.rounds):
                    prompts = [[(i * 7 + r * 13 + k) % 5000 + 50 for k in range(args.prompt)] for i in range(args.streams)]
                    tokens += sum(await asyncio.gather(*(_stream(client, server.base_url, server.model_name, p,
                                                                 args.max_tokens) for p in prompts)))
                return tokens, time.perf_counter() - started, cpu() - cpu0

        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            tokens, wall, engine_cpu = asyncio.run(rounds())
        finally:
            for spinner in spinners:
                spinner.kill()
    return {"tokens_s": tokens / wall, "wall_s": wall, "engine_cpu_s": engine_cpu, "tokens": tokens}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=1, help="processes spinning on the CPU meanwhile (default 1)")
    parser.add_argument("--streams", type=int, default=8, help="completions at once (the embedded MAX_SANDBOXES)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=350, help="tokens per completion (a Terminus answer)")
    parser.add_argument("--prompt", type=int, default=1200, help="prompt tokens per completion")
    parser.add_argument("--policy", type=Path, default=None, help="model dir (default: the tiny policy)")
    args = parser.parse_args()

    from rlkit.embedded.tiny_model import build_tiny_model
    from rlkit.launch.vllm import omp_threads

    model_dir = args.policy.resolve() if args.policy else build_tiny_model(MODEL_CACHE, template="qwen3_coder")
    floor = _measure(False, model_dir, args)
    ours = _measure(True, model_dir, args)
    for name, row in (("vLLM's own OpenMP (floor)", floor),
                      (f"launcher: {omp_threads()} thread(s), passive", ours)):
        print(f"{name:34s} {row['tokens_s']:7.1f} tokens/s  ({row['tokens']} tokens in {row['wall_s']:.1f} s, "
              f"engine {row['engine_cpu_s']:.1f} s of CPU)")
    print(f"ratio {ours['tokens_s'] / floor['tokens_s']:.2f}x  ({args.streams} streams x {args.rounds} rounds, "
          f"{args.busy} busy process(es), {model_dir.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
