"""How the scaffold's agent reaches each sandbox (AGENT_DELIVERY), named in `rlkit check`'s output.

docker: mounted read-only from one volume per agent image, or baked into a layer on every task image.
k8s: the API server is asked (a dry-run pod, nothing is created) whether it keeps image volumes; if not,
an init container fills an emptyDir; bake is the declared fallback (a layered image per task).
The kubernetes client is imported only for BACKEND=k8s with an in-container agent.
"""

from __future__ import annotations

from rlkit.config.schema import AgentDelivery, Backend
from rlkit.validate.findings import Context, Finding, ok, skip, warn


def agent_delivery(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    from rlkit.scaffolds import get_scaffold

    scaffold = get_scaffold(str(c.SCAFFOLD))
    if scaffold.image_recipe is None:
        return [skip("agent_delivery", f"{scaffold.name} runs on the host: no agent in the sandbox")]
    from rlkit.scaffolds.bake import agent_image_ref

    image = agent_image_ref(scaffold)
    if c.AGENT_DELIVERY is AgentDelivery.BAKE:
        return [ok("agent_delivery", f"{scaffold.name} baked: a layer copied from {image} on every task image "
                   f"(`rlkit images build TASKS --scaffold {scaffold.name}`), stored once a task")]
    if c.BACKEND is Backend.DOCKER:
        return [ok("agent_delivery", f"{scaffold.name} mounted read-only from one docker volume filled once from "
                   f"{image}; task images run as built")]
    try:
        core_api = _core_api(ctx)
    except Exception as exc:  # noqa: BLE001 — the backend check says what is wrong with the cluster
        return [skip("agent_delivery", f"k8s: cannot ask the API server ({type(exc).__name__}); see backend")]
    from rlkit.sandbox.agent_volume import k8s_agent_delivery

    choice, why = k8s_agent_delivery(core_api, c.K8S_NAMESPACE, image)
    if choice == "image-volume":
        return [ok("agent_delivery", f"{scaffold.name} on k8s: image volume of {image}, read-only ({why})")]
    return [warn("agent_delivery", f"{scaffold.name} on k8s: init container copying {image} into an emptyDir, "
                 f"mounted read-only ({why}); each pod copies the agent",
                 "enable the ImageVolume feature on the cluster for one copy a node, or AGENT_DELIVERY=bake "
                 "(a layered image per task)", key="AGENT_DELIVERY", where=ctx.resolved.where("AGENT_DELIVERY"))]


def _core_api(ctx: Context):
    from kubernetes import client, config

    path = ctx.resolved.path("KUBECONFIG")
    return client.CoreV1Api(config.new_client_from_config(config_file=str(path)))
