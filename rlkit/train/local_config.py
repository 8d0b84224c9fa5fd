"""What the embedded trainer (TRAINER=local, rlkit/train/local.py) takes from its run config: the step
schedule (verl's rules for TOTAL_STEPS / TOTAL_EPOCHS and the *_FREQ keys), the policy
actor's settings, the run's keys as trackers see them, and the secret mask on log handlers while it runs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlkit.config.resolve import ResolvedConfig
    from rlkit.config.schema import RunConfig


def total_steps(cfg: RunConfig, n_rows: int) -> int:
    """TOTAL_STEPS, else TOTAL_EPOCHS full batches per epoch (verl's dataloader drops the last partial one)."""
    if cfg.TOTAL_STEPS > 0:
        return cfg.TOTAL_STEPS
    return max(1, n_rows // cfg.TRAIN_BSZ) * cfg.TOTAL_EPOCHS


def due(step: int, freq: int, last: int) -> bool:
    """verl's rule: every `freq` steps and at the last one; never when freq <= 0."""
    return freq > 0 and (step % freq == 0 or step == last)


def policy_config(cfg: RunConfig) -> dict[str, Any]:
    from dataclasses import asdict

    from rlkit.train.algo import AlgoConfig

    if cfg.TRAIN_BSZ % cfg.MINI_BSZ:
        from rlkit.errors import ConfigError

        raise ConfigError(f"MINI_BSZ={cfg.MINI_BSZ} does not divide TRAIN_BSZ={cfg.TRAIN_BSZ}", key="MINI_BSZ",
                          fix="pick a MINI_BSZ that divides TRAIN_BSZ")
    return {"algo": asdict(AlgoConfig.from_run_config(cfg)), "optim": {"lr": cfg.LR},
            "max_prompt": cfg.MAX_PROMPT, "max_response": cfg.MAX_RESP,
            "mini_batches": cfg.TRAIN_BSZ // cfg.MINI_BSZ, "seed": cfg.SEED}


def tracking_config(resolved: ResolvedConfig) -> dict[str, str]:
    """The run's keys as W&B / TensorBoard see them: secret keys left out, secret values masked
    wherever another value repeats them (`EXP_NAME=run-${WANDB_API_KEY}`)."""
    from rlkit.config.schema import is_secret
    from rlkit.config.secrets import mask_secrets

    return {k: mask_secrets(str(v), resolved) for k, v in resolved.config.model_dump().items() if not is_secret(k)}


@contextlib.contextmanager
def secrets_masked_in_logs(resolved: ResolvedConfig) -> Iterator[None]:
    """Every root-logger handler masks the run's secret values while the run lasts (a filter on the
    logger itself would miss the records that child loggers propagate)."""
    from rlkit.config.display import CleanFilter

    secret_filter = CleanFilter(resolved.secrets)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(secret_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(secret_filter)
