"""Seeded, epoch-aware task sampling with difficulty filters.

Each epoch is a permutation of the (filtered) rows, fixed by (seed, epoch): a resumed run
that asks for step N gets the same tasks it would have got without the restart.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlkit.errors import UserError
from rlkit.tasks.index import IndexRow


class DifficultyFilter(BaseModel):
    """Which rows to train on. Rows lacking the measured value pass only when `keep_unknown`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_pass_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    max_pass_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    labels: frozenset[str] | None = Field(default=None, description="allowed difficulty labels")
    keep_unknown: bool = Field(default=True, description="keep rows with no pass_rate / difficulty")

    @model_validator(mode="after")
    def _ordered(self) -> DifficultyFilter:
        if self.min_pass_rate is not None and self.max_pass_rate is not None \
                and self.min_pass_rate > self.max_pass_rate:
            raise ValueError(f"min_pass_rate {self.min_pass_rate} > max_pass_rate {self.max_pass_rate}")
        return self

    def accepts(self, row: IndexRow) -> bool:
        if self.min_pass_rate is not None or self.max_pass_rate is not None:
            if row.pass_rate is None:
                if not self.keep_unknown:
                    return False
            else:
                if self.min_pass_rate is not None and row.pass_rate < self.min_pass_rate:
                    return False
                if self.max_pass_rate is not None and row.pass_rate > self.max_pass_rate:
                    return False
        if self.labels is not None:
            if row.difficulty is None:
                return self.keep_unknown
            return row.difficulty.lower() in {label.lower() for label in self.labels}
        return True


class TaskSampler:
    """Batches of index rows: epoch e is a seeded permutation; steps walk epochs in order."""

    def __init__(self, rows: Sequence[IndexRow], *, seed: int = 0,
                 difficulty: DifficultyFilter | None = None, split: str | None = None) -> None:
        self.seed = seed
        self.filter = difficulty or DifficultyFilter()
        self.rows: list[IndexRow] = [r for r in rows if (split is None or r.split == split)
                                     and self.filter.accepts(r)]
        if not self.rows:
            raise UserError(f"no task left after filtering {len(rows)} rows (split={split}, filter="
                            f"{self.filter.model_dump(exclude_defaults=True)})",
                            fix="relax the difficulty filter or check the index split")

    def __len__(self) -> int:
        return len(self.rows)

    def epoch_order(self, epoch: int) -> list[IndexRow]:
        """The rows of one epoch, in its order (a permutation fixed by seed and epoch)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        order = list(self.rows)
        random.Random(f"rlkit-sampler:{self.seed}:{epoch}").shuffle(order)
        return order

    def batch(self, step: int, batch_size: int) -> list[IndexRow]:
        """Rows of training step `step` (0-based). A batch that crosses an epoch end continues into the next."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        start = step * batch_size
        out: list[IndexRow] = []
        epoch, offset = divmod(start, len(self.rows))
        while len(out) < batch_size:
            order = self.epoch_order(epoch)
            take = order[offset:offset + batch_size - len(out)]
            out.extend(take)
            epoch, offset = epoch + 1, 0
        return out

    def epoch_of(self, step: int, batch_size: int) -> int:
        """The epoch step `step` starts in."""
        return (step * batch_size) // len(self.rows)
