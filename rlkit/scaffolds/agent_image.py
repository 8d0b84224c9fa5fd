"""The agent images' names and where an agent lives in a sandbox: what `Scaffold` asks for its mount and
what bake builds. Imports nothing of rlkit.scaffolds at run time (base asks it; bake builds on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlkit.errors import UserError

if TYPE_CHECKING:
    from rlkit.scaffolds.base import Scaffold

AGENTS_ROOT = "/opt/rlkit-agents"
OHSDK_VENV = "/opt/openhands-sdk-venv"  # where harbor's agent looks: a link to the venv inside the agent's tree
# The agent images' layout: every file under /opt/rlkit-agents/<scaffold> (one tree, mountable as one
# volume), FROM the base image (its cp fills a kubernetes emptyDir). Part of the tag: a new layout is a
# new image beside the old one.
AGENT_LAYOUT = "m1"


def agent_image_ref(scaffold: Scaffold) -> str:
    return f"rlkit/agent-{scaffold.name}:{_agent_version(scaffold)}"


def _agent_version(scaffold: Scaffold) -> str:
    recipe = scaffold.image_recipe
    if recipe is None:
        raise UserError(f"scaffold {scaffold.name!r} is not baked into images",
                        fix="it runs on the host; use the task image as it is")
    if recipe.npm_version:
        return f"{recipe.npm_version}-{AGENT_LAYOUT}"
    pins = [r.split("==", 1)[1] for r in recipe.pip_requirements if "==" in r]
    return f"{pins[0] if pins else 'latest'}-{AGENT_LAYOUT}"


def agent_links(scaffold: Scaffold) -> dict[str, str]:
    """Absolute link -> absolute target that put the agent where harbor's classes look: its commands
    in /usr/local/bin (on a login shell's PATH too), the ohsdk venv at /opt/openhands-sdk-venv."""
    recipe = scaffold.image_recipe
    assert recipe is not None
    root = f"{AGENTS_ROOT}/{scaffold.name}"
    links = {f"/usr/local/bin/{name}": f"{root}/{target}" for name, target in recipe.links.items()}
    if recipe.pip_requirements:
        links[OHSDK_VENV] = f"{root}/venv"
    return links


def agent_mount(scaffold: Scaffold, k8s: str = "auto"):
    """What a sandbox mounts instead of a baked layer (rlkit.sandbox.agent_volume.AgentMount)."""
    from rlkit.sandbox.agent_volume import AgentMount

    return AgentMount(image=agent_image_ref(scaffold), scaffold=scaffold.name,
                      target=f"{AGENTS_ROOT}/{scaffold.name}", links=agent_links(scaffold), k8s=k8s)
