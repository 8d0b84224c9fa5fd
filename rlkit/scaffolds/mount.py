"""The agent mounted, not baked (AGENT_DELIVERY mount/auto): what `rlkit images build --scaffold` prepares.

One agent image (`rlkit/agent-<scaffold>:<version>`, bake.build_agent_image) fills one read-only docker
volume (`rlkit.sandbox.agent_volume`), which every task's sandbox mounts: the agent is stored once, not once
a task, and a thousand task images cost what their own layers cost. The disk guard counts the volume once:
before it is filled, never per task. A new agent image (re-pinned or rebuilt) fills a new volume; `rlkit
cleanup` removes the old ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.errors import UserError
from rlkit.scaffolds import get_scaffold
from rlkit.scaffolds.bake import (
    DISK_RESERVE_BYTES,
    GB,
    Log,
    agent_mount,
    agent_payload_bytes,
    build_agent_image,
    docker_free_bytes,
    push_image,
)


@dataclass(frozen=True)
class PreparedMount:
    scaffold: str
    image: str  # the agent image
    volume: str  # the docker volume every sandbox mounts
    payload_bytes: int  # what the volume stores (the agent's tree), once
    filled: bool  # filled now (False: it was there)


def prepare_agent_mount(name: str, *, push: bool = False, log: Log = print) -> PreparedMount | None:
    """The agent image and its volume, made once for every task (None: the scaffold runs on the host).
    With `push`, the agent image goes to its registry for kubernetes nodes (image volume / init container)."""
    from rlkit.sandbox import agent_volume
    from rlkit.sandbox.docker_api import api_client

    scaffold = get_scaffold(name)
    if scaffold.image_recipe is None:
        log(f"✓ {name} runs on the host: nothing to mount")
        return None
    image = build_agent_image(name, log=log)
    api = api_client()
    mount = agent_mount(scaffold)
    image_id = api.inspect_image(image)["Id"]
    volume = agent_volume.volume_name(mount, image_id)
    payload = agent_payload_bytes(api, scaffold) or 0
    existed = any(v.get("Name") == volume for v in agent_volume.agent_volumes(api))
    if not existed:
        seen = docker_free_bytes(api)
        if seen is not None and seen[1] - payload < DISK_RESERVE_BYTES:
            raise UserError(f"no room for the {name} agent's volume: it stores {payload / GB:.2f} GiB and docker's "
                            f"data root {seen[0]} has {seen[1] / GB:.1f} GiB free (the guard stops "
                            f"{DISK_RESERVE_BYTES / GB:.0f} GiB short of full)",
                            fix="free space there (`docker image prune`, `rlkit cleanup` for old agent volumes) or "
                                "move docker's data-root to a larger disk")
    volume = agent_volume.ensure_agent_volume(api, mount)
    if push:
        push_image(image)
    log(f"✓ {name}: volume {volume} ({payload / GB:.2f} GiB, stored once) mounted read-only by every task's sandbox")
    return PreparedMount(name, image, volume, payload, not existed)
