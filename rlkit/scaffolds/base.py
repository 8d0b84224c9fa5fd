"""What a scaffold adapter is: a declarative description of one agent CLI.

An adapter says which harbor agent class runs the scaffold, how that agent is pointed
at rlkit's proxy for one trial's session (env vars, flags, config file — all produced
by harbor's own agent class from `base_url` / `model_name` / kwargs), whether it runs
inside the sandbox or on the host, and how it is baked into a sandbox image. It
produces a harbor `AgentConfig` (import_path + kwargs) that the trial runner passes to
harbor's `Trial`.

Networking: in-container agents reach the proxy at its address as seen from the
sandbox. With the docker backend on one machine the sandbox runs with network mode
`host` and the proxy listens on 127.0.0.1; on k8s the proxy URL is a service address.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from rlkit.config.schema import DEFAULT_PROXY_PORT, AgentApi

DEFAULT_PROXY_URL = f"http://127.0.0.1:{DEFAULT_PROXY_PORT}"
# The proxy ignores the key's value; agents refuse to start without one.
PROXY_API_KEY = "rlkit-proxy"


class ScaffoldRun(BaseModel):
    """Everything an adapter needs to point one trial's agent at the proxy."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(description="proxy session id of this trial (one per trial)")
    model: str = Field(description="served model name the proxy knows the policy by")
    proxy_url: str = Field(default=DEFAULT_PROXY_URL,
                           description="proxy address as seen from where the agent runs")
    max_turns: int | None = Field(default=None, ge=1, description="cap on agent turns, where supported")
    temperature: float | None = Field(default=None, ge=0, description="sampling temperature, where supported")
    extra_kwargs: dict[str, Any] = Field(default_factory=dict,
                                         description="extra kwargs for the harbor agent class")

    def session_url(self) -> str:
        """Base of this session's routes on the proxy: `<proxy>/s/<session>`."""
        return f"{self.proxy_url.rstrip('/')}/s/{self.session}"

    def openai_base_url(self) -> str:
        return f"{self.session_url()}/v1"

    def trajectory_url(self) -> str:
        return f"{self.session_url()}/trajectory"


class AgentImageRecipe(BaseModel):
    """How an agent's image is made: files staged on the host, copied to /opt/rlkit-agents/<scaffold>
    (mounted from there read-only into each sandbox, or baked into a layer on each task image)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    npm_package: str | None = None
    npm_version: str | None = None
    npm_binary: str | None = Field(default=None, description="native binary inside node_modules to ship")
    pip_requirements: tuple[str, ...] = ()
    # What the agent's Python needs without a network: set for the build's import check and for every trial.
    offline_env: dict[str, str] = Field(default_factory=dict)
    # name on PATH -> path inside the image
    links: dict[str, str] = Field(default_factory=dict)


class Scaffold:
    """Base of every adapter. Subclasses set the class attributes and `agent_kwargs`."""

    name: ClassVar[str]
    description: ClassVar[str]
    # "module:Class" of the harbor agent subclass that runs this scaffold.
    agent_import_path: ClassVar[str]
    api_format: ClassVar[AgentApi]  # the AGENT_API value its scaffold axis module sets
    runs_in_container: ClassVar[bool] = True
    # In-container agents must reach the proxy; on one machine that means network mode host.
    network_mode: ClassVar[str] = "host"
    supports_max_turns: ClassVar[bool] = False
    image_recipe: ClassVar[AgentImageRecipe | None] = None

    def agent_kwargs(self, run: ScaffoldRun) -> dict[str, Any]:
        """kwargs of the harbor agent class (flags, config, limits)."""
        return {}

    def agent_env(self, run: ScaffoldRun) -> dict[str, str]:
        """Env vars set for the agent (harbor `AgentConfig.env`): API keys the agent insists on."""
        return {}

    def model_name(self, run: ScaffoldRun) -> str:
        """The model selector the agent class expects (provider prefix varies per agent)."""
        return run.model

    def base_url(self, run: ScaffoldRun) -> str | None:
        return run.openai_base_url() if self.api_format is AgentApi.OPENAI else run.session_url()

    def agent_config(self, run: ScaffoldRun) -> Any:
        """harbor `AgentConfig` for one trial (harbor imported lazily)."""
        from harbor.models.trial.config import AgentConfig

        kwargs = {"rlkit_trajectory_url": run.trajectory_url(), "rlkit_scaffold": self.name,
                  **self.agent_kwargs(run), **run.extra_kwargs}
        return AgentConfig(import_path=self.agent_import_path, model_name=self.model_name(run),
                           base_url=self.base_url(run), kwargs=kwargs, env=self.agent_env(run))

    def environment_kwargs(self, backend: str = "docker", delivery: str = "mount") -> dict[str, Any]:
        """kwargs for the sandbox backend (`TrialEnvironmentConfig.kwargs`): the task image as it is with
        the agent mounted read-only from its own image (AGENT_DELIVERY mount/auto), or the task image with
        the agent baked in (bake). On docker, in-container agents get the network they reach the
        proxy by; a host-side agent leaves the task's own network policy alone. (On k8s the
        backend serves harbor's allowlist of the proxy as a NetworkPolicy, so the proxy must
        listen on an address pods reach.)"""
        kwargs: dict[str, Any] = {"image_variant": "latest"}
        if self.image_recipe is not None and delivery == "bake":
            kwargs["image_variant"] = self.name
        elif self.image_recipe is not None:
            from rlkit.scaffolds.agent_image import agent_mount

            kwargs["agent_mount"] = agent_mount(self).model_dump()
        if backend == "docker" and self.runs_in_container:
            kwargs["network"] = self.network_mode
        return kwargs

    def environment_import_path(self, backend: str) -> str:
        """Sandbox class for `backend`. On docker, in-container agents need the variant
        that lets harbor's proxy allowlist through (see rlkit.scaffolds.sandbox)."""
        if backend == "docker" and self.runs_in_container:
            return "rlkit.scaffolds.sandbox:ProxyDockerEnvironment"
        from rlkit.sandbox import IMPORT_PATHS

        return IMPORT_PATHS.get(backend, backend)

    def trial_fields(self, run: ScaffoldRun, backend: str = "docker", delivery: str = "mount") -> dict[str, Any]:
        """The scaffold's part of a `rlkit.rollout.trial.TrialSpec`: agent, backend and its kwargs."""
        return {"agent": self.agent_config(run), "backend": self.environment_import_path(backend),
                "environment_kwargs": self.environment_kwargs(backend, delivery)}

    def describe(self) -> dict[str, Any]:
        """Capabilities, for `rlkit check` output and docs."""
        return {"name": self.name, "api_format": self.api_format.value,
                "runs_in_container": self.runs_in_container, "network_mode": self.network_mode,
                "supports_max_turns": self.supports_max_turns, "baked": self.image_recipe is not None}
