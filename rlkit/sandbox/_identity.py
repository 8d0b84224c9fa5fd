"""What both backends share: which image a trial runs and whose sandbox it is (labels)."""

from __future__ import annotations

from harbor.environments.options import EnvironmentOptions
from pydantic import Field

from rlkit.sandbox.labels import SandboxLabels


class SandboxIdentityOptions(EnvironmentOptions):
    """Image and ownership kwargs common to every rlkit backend."""

    image: str | None = Field(None, description="image to run; default: the task's image")
    registry: str | None = Field(None, description="registry prefix of task images (site.env REGISTRY)")
    image_variant: str = Field("latest", description="task image tag; a scaffold name for baked-agent layers")
    project: str | None = Field(None, description="label rlkit.project (default $RLKIT_PROJECT)")
    experiment: str | None = Field(None, description="label rlkit.experiment (default $RLKIT_EXPERIMENT)")
    step: str | int | None = Field(None, description="label rlkit.step (default $RLKIT_STEP)")
    session: str | None = Field(None, description="label rlkit.session (default: harbor's session id)")


class SandboxIdentity:
    """Mixin for harbor environments whose options derive from `SandboxIdentityOptions`."""

    opts: SandboxIdentityOptions

    def image_ref(self) -> str:
        from rlkit.sandbox.images import task_image_ref

        if self.opts.image:
            return self.opts.image
        if self.task_env_config.docker_image:  # type: ignore[attr-defined]
            return self.task_env_config.docker_image  # type: ignore[attr-defined]
        return task_image_ref(self.environment_name, self.opts.registry,  # type: ignore[attr-defined]
                              self.opts.image_variant)

    def labels(self) -> dict[str, str]:
        overrides: dict[str, object] = {"session": self.opts.session or self.session_id,  # type: ignore[attr-defined]
                                        "task": self.environment_name}  # type: ignore[attr-defined]
        for key in ("project", "experiment", "step"):
            value = getattr(self.opts, key)
            if value is not None:
                overrides[key] = value
        return SandboxLabels.from_env(**overrides).as_dict()
