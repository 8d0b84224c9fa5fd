"""Where a run's artifacts live under OUTPUT_DIR: one definition for trainers, checks and readers.

    logs/<exp>.log                          verl console lines (`step:N - key:value - ...`)
    logs/<exp>.jsonl                        verl file logger ({"step": N, "data": {...}} per line)
    logs/<exp>_vllm.log                     vLLM's throughput lines
    logs/<exp>_ray.log                      TRAINER=verl: Ray's own lines (the raylet's, the driver's); never steps
    logs/<exp>.lock                         JSON: the run in flight (pid, host, user, started, heartbeat)
    logs/<exp>_attempts.jsonl               one line per start of the run (the attempt markers of the metric logs)
    logs/tensorboard/<project>/<exp>/       tensorboard event files (LOGGER=tensorboard)
    logs/wandb/                             wandb's offline run directory (LOGGER=wandb without network/key)
    checkpoints/<project>/<exp>/global_step_<N>/
    harbor_trials/<project>/<exp>/step_<N>/
    harbor_trials/<project>/<exp>_val/step_<N>/   validation trials (results.jsonl, eval.json)
    .rlkit/runs/<project>/<exp>/            a trainer's scratch (the weights vLLM reloads, vLLM caches)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def machine_cache_dir() -> Path:
    """rlkit's cache on this machine, shared by every clone and run: $RLKIT_CACHE_DIR, else ~/.cache/rlkit
    (the key's default). Holds the parser probe's verdicts, the image profiles and the warm starts."""
    return Path(os.environ.get("RLKIT_CACHE_DIR") or "~/.cache/rlkit").expanduser()


@dataclass(frozen=True)
class RunPaths:
    root: Path
    project: str
    exp: str

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def console_log(self) -> Path:
        return self.logs / f"{self.exp}.log"

    @property
    def jsonl(self) -> Path:
        return self.logs / f"{self.exp}.jsonl"

    @property
    def vllm_log(self) -> Path:
        return self.logs / f"{self.exp}_vllm.log"

    @property
    def attempts(self) -> Path:
        return self.logs / f"{self.exp}_attempts.jsonl"

    @property
    def lock(self) -> Path:
        return self.logs / f"{self.exp}.lock"

    @property
    def tensorboard(self) -> Path:
        return self.logs / "tensorboard" / self.project / self.exp

    @property
    def wandb(self) -> Path:
        return self.logs / "wandb"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints" / self.project / self.exp

    @property
    def trials(self) -> Path:
        return self.root / "harbor_trials" / self.project / self.exp

    @property
    def state(self) -> Path:
        return self.root / ".rlkit" / "runs" / self.project / self.exp

    @property
    def val_exp(self) -> str:
        """The experiment name validation trials run under (their sandbox labels and trial folders)."""
        return f"{self.exp}_val"

    @property
    def val_trials(self) -> Path:
        return self.root / "harbor_trials" / self.project / self.val_exp
