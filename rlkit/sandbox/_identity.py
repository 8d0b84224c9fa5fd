"""What both backends share: which image a trial runs and whose sandbox it is (labels)."""

from __future__ import annotations

from harbor.environments.options import EnvironmentOptions
from pydantic import Field

from rlkit.sandbox.agent_volume import AgentMount
from rlkit.sandbox.labels import SandboxLabels


def sandbox_hostname(task: str) -> str:
    """Every sandbox of `task` has this hostname: 12 hex characters, the form of docker's default (the
    container id), but the same in every trial. The agent's shell prompt shows it (root@<host>:/app#),
    so a random one made two trials of one task see different prompts (seeded attempts drew apart), and
    a name of another form is a prompt a policy trained on docker's never saw."""
    import hashlib

    return hashlib.sha256(f"rlkit-sandbox:{task}".encode()).hexdigest()[:12]


class SandboxIdentityOptions(EnvironmentOptions):
    """Image and ownership kwargs common to every rlkit backend."""

    image: str | None = Field(None, description="image to run; default: the task's image")
    registry: str | None = Field(None, description="registry prefix of task images (site.env REGISTRY); the "
                                 "caller names the image with it")
    image_variant: str = Field("latest", description="task image tag; a scaffold name for baked-agent layers "
                               "(the caller names the image with it)")
    agent_mount: AgentMount | None = Field(None, description="an agent mounted read-only from its own image "
                                           "(the task image stays as it is)")
    project: str | None = Field(None, description="label rlkit.project (default $RLKIT_PROJECT)")
    experiment: str | None = Field(None, description="label rlkit.experiment (default $RLKIT_EXPERIMENT)")
    step: str | int | None = Field(None, description="label rlkit.step (default $RLKIT_STEP)")
    session: str | None = Field(None, description="label rlkit.session (default: harbor's session id)")


class SandboxIdentity:
    """Mixin for harbor environments whose options derive from `SandboxIdentityOptions`."""

    opts: SandboxIdentityOptions

    def image_ref(self) -> str:
        """The image the caller named (`image`, from `rlkit.tasks.images`), else the task's docker_image.
        A sandbox never makes up a task image name: one rule, owned by the tasks."""
        if self.opts.image:
            return self.opts.image
        if self.task_env_config.docker_image:  # type: ignore[attr-defined]
            return self.task_env_config.docker_image  # type: ignore[attr-defined]
        from rlkit.errors import SandboxError

        raise SandboxError(f"no image for task {self.environment_name}: pass image= (the task's name from "  # type: ignore[attr-defined]
                           "rlkit.tasks.images.task_image_ref) or set [environment].docker_image")

    def hostname(self) -> str:
        return sandbox_hostname(self.environment_name)  # type: ignore[attr-defined]

    def labels(self) -> dict[str, str]:
        overrides: dict[str, object] = {"session": self.opts.session or self.session_id,  # type: ignore[attr-defined]
                                        "task": self.environment_name}  # type: ignore[attr-defined]
        for key in ("project", "experiment", "step"):
            value = getattr(self.opts, key)
            if value is not None:
                overrides[key] = value
        return SandboxLabels.from_env(**overrides).as_dict()
