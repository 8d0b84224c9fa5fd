"""A run's validation pass@1 over its steps, from its metric files: the before and after of a run."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.config.paths import RunPaths
from rlkit.monitor.metrics import read_all


@dataclass(frozen=True)
class Validation:
    step: int
    pass1: float
    stderr: float | None = None

    def __str__(self) -> str:
        se = f" ± {self.stderr:.3f}" if self.stderr is not None else ""
        return f"step {self.step} {self.pass1:.3f}{se}"


def validations(paths: RunPaths) -> list[Validation]:
    """Every logged validation (`val/pass@1`, with `val/pass@1_stderr` when logged), in step order."""
    out = []
    for step, data in sorted(read_all(paths).steps.items()):
        pass1 = data.get("val/pass@1")
        if pass1 is not None:
            out.append(Validation(step, pass1, data.get("val/pass@1_stderr")))
    return out


def before_after(paths: RunPaths) -> str | None:
    """`validation pass@1: step 0 0.286 ± 0.060 -> step 8 0.536 ± 0.066 (1 s.e.)`, or None before two."""
    found = validations(paths)
    if len(found) < 2:
        return None
    first, last = found[0], found[-1]
    return f"validation pass@1: {first} -> {last} (gain {last.pass1 - first.pass1:+.3f}; ± is 1 s.e.)"
