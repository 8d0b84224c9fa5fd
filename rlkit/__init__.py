"""rlkit: RL training of coding-agent LLM policies on real repository tasks.

The public API (rlkit.api, re-exported here) does everything the `rlkit` command does:

    import rlkit
    report = rlkit.check("my_run.env", TRAIN_BSZ=8)      # Run Validation; upper-case keywords override keys
    result = rlkit.train("my_run.env", TOTAL_STEPS=2)    # blocking, in this process
    handle = rlkit.run("my_run.env")                     # background: pid, log, lock
    rlkit.status(handle), rlkit.eval(model_dir, "val.parquet", k=4), rlkit.cleanup("my_run.env")

Heavy modules (ray, torch, verl, vllm) are imported lazily by the code paths that
need them, so `import rlkit` and `rlkit.check` stay fast.
"""

from rlkit.api import (
    check,
    ckpt_merge,
    ckpt_prune,
    cleanup,
    eval,
    resolve,
    rollout,
    run,
    status,
    tasks_check,
    train,
)

__version__ = "0.1.0"

__all__ = ["__version__", "check", "ckpt_merge", "ckpt_prune", "cleanup", "eval", "resolve", "rollout", "run",
           "status", "tasks_check", "train"]
