"""How a task is graded: in a clean container from its image, or in place (task.toml).

A task whose result lives in files (a repository task: the fix is in its working dir) is
graded in a new container from the task's image into which only its work product is copied:
the image's working dir, or the paths the task names. A task whose result is the container's
state (a service configured, a file in /etc) says so and is graded in place. harbor ignores
the table (its models drop unknown keys), so the task stays a harbor task:

    [verifier.rlkit]
    grading = "in-place"            # default "clean"
    work_product = ["/app", "/srv/site"]   # default: the image's working dir
    work_product_max_mb = 256

A working dir of `/` has nothing to carry: such a task (with no `work_product`) is graded in place.
"""

from __future__ import annotations

import posixpath
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlkit.config.files import read_text, shape_error
from rlkit.errors import UserError

GradingMode = Literal["clean", "in-place"]
TABLE = "verifier.rlkit"
# Folders a work product may not be (or lie in): the system, the verifier's and rlkit's own.
FORBIDDEN = ("/proc", "/sys", "/dev", "/tests", "/logs", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64",
             "/boot", "/run", "/var/lib/dpkg")
MAX_PATHS = 16


class GradingSpec(BaseModel):
    """`[verifier.rlkit]` of a task.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grading: GradingMode = Field("clean", description="clean: a new container, the work product copied in; "
                                 "in-place: the agent's container (its state is the result)")
    work_product: list[str] = Field(default_factory=list, max_length=MAX_PATHS,
                                    description="absolute paths carried into the clean container "
                                    "(default: the image's working dir)")
    work_product_max_mb: int = Field(256, ge=1, le=4096, description="most bytes of regular files carried")

    @field_validator("work_product")
    @classmethod
    def _absolute_and_allowed(cls, paths: list[str]) -> list[str]:
        out = []
        for raw in paths:
            if not raw.startswith("/") or "\x00" in raw:
                raise ValueError(f"{raw!r} is not an absolute path")
            path = posixpath.normpath(raw)
            if path == "/" or any(path == f or path.startswith(f + "/") for f in FORBIDDEN):
                raise ValueError(f"{path} cannot be a work product (the system's or the verifier's)")
            out.append(path)
        return out

    def product_paths(self, workdir: str | None) -> list[str]:
        """What is carried: the declared paths, else the working dir (none when it is `/`)."""
        if self.work_product:
            return list(self.work_product)
        path = posixpath.normpath(workdir or "/")
        return [] if path == "/" else [path]

    def mode_for(self, workdir: str | None) -> GradingMode:
        """The mode used: `in-place` when there is nothing to carry."""
        return "in-place" if self.grading == "in-place" or not self.product_paths(workdir) else "clean"


def read_grading_spec(task_dir: str | Path) -> GradingSpec:
    """The task's `[verifier.rlkit]` (defaults when absent); UserError naming file, key and fix."""
    path = Path(task_dir) / "task.toml"
    try:
        data = tomllib.loads(read_text(path, max_bytes=1 << 20))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML: {exc}", file=str(path), fix="compare with examples/tasks/") from exc
    table = (data.get("verifier") or {}).get("rlkit") if isinstance(data.get("verifier"), dict) else None
    if table is None:
        return GradingSpec()
    try:
        return GradingSpec.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join([TABLE, *map(str, first.get("loc", ()))])
        raise UserError(f"{path}: [{TABLE}] {shape_error(exc, table)}", file=str(path), key=key,
                        fix='grading = "clean" | "in-place"; work_product = ["/app"] (absolute paths)') from exc
