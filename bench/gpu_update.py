"""The embedded trainer's policy update on a GPU: tokens/s, TFLOP/s, MFU and peak memory per technique.

Runs rlkit.train.policy.PolicyUpdater.update (the code the local loop runs) on a randomly
initialised Qwen3-0.6B-shaped model (596M parameters, vocab 151,936, tied embeddings) in bf16,
over synthetic agent trajectories: a prompt, then the response alternates sampled spans
(mask 1) and tool-output spans (mask 0), GRPO groups of 4 with 0/1 rewards.

The first row is the plain HF + torch path (padded rows, HF SDPA attention, full logits,
one sequence per micro-batch, fused AdamW); every other row adds techniques, so each figure
is a ratio against a baseline measured in the same run. MFU is against a bf16 GEMM ceiling
(8192^3 matmul) measured at the start of the same run.

FLOPs per update (the forward is counted once and the backward twice, recomputation not counted):
    6 * (decoder-layer matmul params) * tokens + 6 * (lm_head params) * loss tokens
    + 3 * causal attention (2 * 2 * L^2/2 * heads * head_dim * layers per row of L tokens)
The lm_head is counted on loss tokens only (the tokens whose log-prob the loss needs), for
every row, the plain one included. `mfu_6N` counts the lm_head on every token instead (the
common 6N convention, as in the issue's baseline figures).

    python bench/gpu_update.py                         # one GPU, all rows, 8k tokens
    torchrun --nproc-per-node 2 bench/gpu_update.py --rows best   # FSDP2, any world size
    python bench/gpu_update.py --toy --device cpu      # CI: tiny model, asserts nothing

NVLink multicast stays off for multi-GPU runs (NCCL_NVLS_ENABLE=0 is set here if unset).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch

from rlkit.train.algo import AlgoConfig
from rlkit.train.batch import TrainBatch, batch_from_rows
from rlkit.train.policy import OptimConfig, PolicyUpdater, UpdateFlags

PLAIN = UpdateFlags.plain()
CHUNKED = replace(PLAIN, chunked_logits=True)
PACKED = UpdateFlags(packing=True, micro_batch_tokens=16384)
TECHNIQUES: dict[str, UpdateFlags] = {
    "plain (HF sdpa, full logits, 1 seq/micro)": PLAIN,
    "+ chunked logprob (loss tokens only)": CHUNKED,
    "+ packing (16k tokens/micro)": PACKED,
    "+ cudnn attention": replace(PACKED, attention="cudnn"),
    "+ compile (layers, lm_head chunk)": replace(PACKED, attention="cudnn", compile=True),
    "+ packing 32k tokens/micro": replace(PACKED, attention="cudnn", compile=True, micro_batch_tokens=32768),
    "+ activation ckpt, 64k tokens/micro": replace(PACKED, attention="cudnn", compile=True,
                                                   activation_checkpointing=True, micro_batch_tokens=65536),
    # the plain row's micro-batch size (one 8k row), for a like-for-like peak memory
    "compiled, packed, cudnn at 8k tokens/micro": replace(PACKED, attention="cudnn", compile=True,
                                                          micro_batch_tokens=8192),
}
BEST = "+ packing 32k tokens/micro"


def qwen3_config(toy: bool):
    from transformers import Qwen3Config

    if toy:
        return Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                           max_position_embeddings=4096)
    return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                       max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6)


def synthetic_batch(rows: int, length: int, vocab: int, seed: int) -> TrainBatch:
    """Agent-like rows of `length` tokens: prompt 1/8, response = sampled / tool-output spans."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(rows):
        p = max(1, length // 8)
        r = length - p
        mask: list[int] = []
        sampled = True
        while len(mask) < r:
            span = int(torch.randint(32, 400 if sampled else 800, (1,), generator=g))
            mask += [int(sampled)] * span
            sampled = not sampled
        mask = mask[:r]
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        logprobs = (-torch.rand(r, generator=g) * 2).tolist()
        out.append((f"g{i // 4}", float(torch.rand(1, generator=g) > 0.5), ids[:p], ids[p:], mask, logprobs))
    return batch_from_rows(out, pad_id=0)


def gemm_ceiling(device: torch.device, toy: bool) -> float:
    n = 512 if toy else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(10):
        a @ b
    sync(device)
    return 2 * n**3 * 10 / (time.perf_counter() - t) / 1e12


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def update_flops(model, batch: TrainBatch) -> tuple[float, float]:
    """(FLOPs with the lm_head on loss tokens, FLOPs with the lm_head on every token) of one update."""
    cfg = model.config
    layer_params = sum(p.numel() for n, p in model.model.layers.named_parameters() if p.dim() == 2)
    head = cfg.vocab_size * cfg.hidden_size
    lengths = (batch.prompt_lengths + batch.response_lengths).double()
    tokens, loss_tokens = float(lengths.sum()), float(batch.response_mask.sum())
    attn = float((2 * 2 * lengths**2 / 2).sum()) * cfg.num_attention_heads * cfg.head_dim * cfg.num_hidden_layers
    base = 6 * layer_params * tokens + 3 * attn
    return base + 6 * head * loss_tokens, base + 6 * head * tokens


def run_row(name: str, flags: UpdateFlags, args, device: torch.device, world: int, ceiling: float,
            algo: AlgoConfig, length: int) -> dict:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    config = qwen3_config(args.toy)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    updater = PolicyUpdater(None, algo, OptimConfig(lr=1e-6), device=str(device), flags=flags, model=model)
    rank = updater.rank
    batch = synthetic_batch(args.rows, length, config.vocab_size, seed=1 + rank)
    flops, flops_6n = update_flops(model, batch)
    for i in range(args.warmup):  # new shapes each time, so compiled code settles before timing
        updater.update(synthetic_batch(args.rows, length, config.vocab_size, seed=100 + rank + 1000 * i),
                       mini_batches=1)
    sync(device)
    t = time.perf_counter()
    metrics = {}
    for _ in range(args.steps):
        metrics = updater.update(batch, mini_batches=args.mini_batches)
        batch.advantages = None
    sync(device)
    seconds = (time.perf_counter() - t) / args.steps
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    del updater, model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    tflops = flops / seconds / 1e12
    return {"row": name, "algo": algo.loss_mode, "seq_len": length, "world": world,
            "tokens_per_s": batch.num_tokens() * world / seconds, "tokens_per_s_per_gpu": batch.num_tokens() / seconds,
            "tflops_per_gpu": tflops, "mfu": tflops / ceiling, "mfu_6N": flops_6n / seconds / 1e12 / ceiling,
            "peak_gib": peak, "step_s": seconds, "pg_loss": metrics.get("actor/pg_loss", float("nan"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--toy", action="store_true", help="tiny model and sequences (CPU CI run)")
    parser.add_argument("--rows", dest="select", default="all", help="all | best | plain,best | comma-separated row names")
    parser.add_argument("--seq-lens", default="8192", help="comma-separated trajectory lengths")
    parser.add_argument("--algos", default="grpo", help="comma-separated: grpo, gspo")
    parser.add_argument("--batch-rows", dest="rows", type=int, default=8, help="trajectories per update per GPU")
    parser.add_argument("--mini-batches", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", type=Path, help="append result rows here (JSON lines)")
    args = parser.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    import torch._dynamo

    # every row builds a fresh model, so compiled layers recompile per row; never fall back to eager
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    device = torch.device(args.device)
    if world > 1:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    rank = int(os.environ.get("RANK", "0"))
    ceiling = gemm_ceiling(device, args.toy) if device.type == "cuda" else 1.0
    if args.toy:
        lengths = [128]
        techniques = {"plain": PLAIN, "chunked": replace(CHUNKED, logprob_chunk=32),
                      "packed": replace(PACKED, micro_batch_tokens=256, logprob_chunk=32),
                      "packed+ckpt": replace(PACKED, micro_batch_tokens=256, activation_checkpointing=True)}
    else:
        lengths = [int(x) for x in args.seq_lens.split(",")]
        techniques = TECHNIQUES
    wanted = list(techniques) if args.select == "all" else [
        BEST if x == "best" else next(n for n in techniques if n.startswith(x) or x in n)
        for x in args.select.split(",")]
    if rank == 0:
        print(f"world {world}, device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}, "
              f"bf16 GEMM ceiling {ceiling:.0f} TFLOP/s, {args.rows} rows x seq, torch {torch.__version__}",
              flush=True)
    results = []
    for algo_name in args.algos.split(","):
        algo = AlgoConfig(loss_mode="gspo", loss_agg_mode="seq-mean-token-mean", clip_ratio_low=3e-4,
                          clip_ratio_high=4e-4) if algo_name == "gspo" else AlgoConfig()
        for length in lengths:
            for name in wanted:
                try:
                    row = run_row(name, techniques[name], args, device, world, ceiling, algo, length)
                except Exception as exc:  # noqa: BLE001 - one row failing must not lose the others' numbers
                    error = f"{type(exc).__name__}: {str(exc)[:300]}"
                    row = {"row": name, "algo": algo.loss_mode, "seq_len": length, "error": error}
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                results.append(row)
                if rank == 0:
                    print(json.dumps(row), flush=True)
                    if args.json:
                        with args.json.open("a") as f:
                            f.write(json.dumps(row) + "\n")
    if rank == 0:
        print_table(results)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


def print_table(results: list[dict]) -> None:
    plain = {(r["algo"], r["seq_len"]): r for r in results if r["row"].startswith("plain") and "error" not in r}
    print("\n| row | algo | seq | GPUs | tokens/s | x plain | TFLOP/s/GPU | MFU | MFU(6N) | peak GiB |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['row']} | {r['algo']} | {r['seq_len']} | | failed: {r['error'][:80]} | | | | | |")
            continue
        base = plain.get((r["algo"], r["seq_len"]))
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else ""
        print(f"| {r['row']} | {r['algo']} | {r['seq_len']} | {r['world']} | {r['tokens_per_s']:,.0f} | {ratio} | "
              f"{r['tflops_per_gpu']:.0f} | {r['mfu']:.1%} | {r['mfu_6N']:.1%} | {r['peak_gib']:.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
