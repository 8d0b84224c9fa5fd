"""An agent mounted read-only into the task's sandbox instead of baked into a layer on its image.

One volume per agent image (docker) holds the agent's tree, filled once: docker copies an image's
files at a mount point into an empty named volume when a container is created on it, so a helper
container created (never started) from the agent image fills the volume. Every sandbox of every task
then mounts it read-only at the same path; the task image stays as its author built it. What the
agent needs besides its tree (links on PATH: login shells reset PATH, so env vars would not do) is
written at sandbox start, after the verifier's image profile was probed, so the profile (cached per
image, shared by every scaffold) never sees the agent.

The volume is named after the agent image's id, so a rebuilt or re-pinned agent fills a new volume;
`rlkit cleanup` removes the ones no agent image names any more (`stale_agent_volumes`).

On kubernetes the same tree reaches the pod by an image volume (where the API server keeps the field),
else an init container copying it into an emptyDir (`pod_agent_parts`).
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlkit.errors import SandboxError
from rlkit.sandbox import labels as sandbox_labels

VOLUME_PREFIX = "rlkit-agent-"
AGENT = "rlkit.agent"  # the scaffold name, on volumes (as on agent images)
AGENT_IMAGE = "rlkit.agent-image"  # the id of the agent image a volume was filled from
AGENT_REF = "rlkit.agent-ref"  # the agent image's reference (repo:version), for people reading `docker volume ls`
K8sAgentDelivery = Literal["auto", "image-volume", "init-container"]


class AgentMount(BaseModel):
    """What a sandbox mounts: the agent image's tree at `target`, and links made at start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(description="the agent image (rlkit/agent-<scaffold>:<version>)")
    scaffold: str = Field(description="the scaffold it belongs to (label rlkit.agent)")
    target: str = Field(description="absolute path the agent's tree is mounted at (read-only)")
    links: dict[str, str] = Field(default_factory=dict,
                                  description="absolute link path -> absolute target, made at sandbox start")
    k8s: K8sAgentDelivery = Field("auto", description="how a pod gets the tree: auto (what the API server "
                                  "offers, `k8s_agent_delivery`), image-volume or init-container")


def volume_name(mount: AgentMount, image_id: str) -> str:
    """`rlkit-agent-<scaffold>-<version>-<12 hex of the image id>`: a new agent image, a new volume."""
    version = mount.image.rsplit(":", 1)[-1] if ":" in mount.image.rsplit("/", 1)[-1] else "latest"
    short = image_id.split(":", 1)[-1][:12]
    return sandbox_labels.label_value(f"{VOLUME_PREFIX}{mount.scaffold}-{version}-{short}")


def volume_labels(mount: AgentMount, image_id: str) -> dict[str, str]:
    owner = sandbox_labels.SandboxLabels.from_env().as_dict()
    keep = (sandbox_labels.MANAGED, sandbox_labels.PROJECT, sandbox_labels.OWNER_UID, sandbox_labels.OWNER_USER,
            sandbox_labels.OWNER_HOST)
    return {**{k: owner[k] for k in keep}, AGENT: mount.scaffold, AGENT_IMAGE: image_id,
            AGENT_REF: mount.image}


_filled: set[str] = set()  # volumes this process saw filled
_known_ids: dict[str, str] = {}  # agent image reference -> its id, as this process first found it
_fill_lock = threading.Lock()


def ensure_agent_volume(api, mount: AgentMount) -> str:
    """The name of the volume holding `mount.image`'s tree, filled first when there is none."""
    import docker.errors

    known = _known_ids.get(mount.image)  # this process's sandboxes ask docker once (a new process, once more)
    if known is not None and volume_name(mount, known) in _filled:
        return volume_name(mount, known)
    try:
        image_id = api.inspect_image(mount.image)["Id"]
        _known_ids[mount.image] = image_id
    except docker.errors.ImageNotFound:
        raise SandboxError(f"agent image {mount.image} is not on this docker host", image=mount.image,
                           fix=f"build it: rlkit images agents {mount.scaffold}") from None
    name = volume_name(mount, image_id)
    with _fill_lock:
        if name in _filled:
            return name
        import tempfile

        from filelock import FileLock

        # Two processes (a run beside `rlkit images build`, test workers) fill one volume once.
        with FileLock(f"{tempfile.gettempdir()}/{name}.lock"):
            if not _volume_is_filled(api, name, image_id):
                _fill(api, mount, name, image_id)
        _filled.add(name)
        return name


def _volume_is_filled(api, name: str, image_id: str) -> bool:
    import docker.errors

    try:
        info = api.inspect_volume(name)
    except docker.errors.NotFound:
        return False
    return (info.get("Labels") or {}).get(AGENT_IMAGE) == image_id and bool(
        (info.get("Labels") or {}).get("rlkit.filled"))


def _fill(api, mount: AgentMount, name: str, image_id: str) -> None:
    """Create the volume and let docker copy the agent image's tree into it: a container created (not
    started) on an empty named volume gets the image's files at the mount point, inside the create call.
    The `rlkit.filled` label is set at creation; a fill that fails removes the volume again."""
    import docker.errors

    try:
        api.remove_volume(name)  # one made by something else under this name: refill (fails while in use)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        raise SandboxError(f"agent volume {name} exists but was not filled by rlkit and is in use: {exc}",
                           fix=f"docker volume rm {name} once no sandbox uses it") from None
    api.create_volume(name, labels={**volume_labels(mount, image_id), "rlkit.filled": "1"})
    helper = None
    try:
        host_config = api.create_host_config(
            mounts=[_docker_mount(name, mount.target, read_only=False, no_copy=False)], network_mode="none")
        helper = api.create_container(mount.image, command=["true"], host_config=host_config,
                                      labels={AGENT: mount.scaffold, "rlkit.agent-fill": name})["Id"]
    except BaseException as exc:
        api.remove_volume(name, force=True)
        if isinstance(exc, docker.errors.APIError):
            raise SandboxError(f"filling agent volume {name} from {mount.image} failed: {exc}",
                               image=mount.image) from exc
        raise
    finally:
        if helper is not None:
            api.remove_container(helper, force=True)


def _docker_mount(source: str, target: str, *, read_only: bool, no_copy: bool):
    import docker.types

    return docker.types.Mount(target, source, type="volume", read_only=read_only, no_copy=no_copy)


def docker_mount(volume: str, mount: AgentMount):
    """The read-only mount every task container gets (never copied into: the volume is already full)."""
    return _docker_mount(volume, mount.target, read_only=True, no_copy=True)


def links_tar(mount: AgentMount) -> bytes | None:
    """A tar of the start-time links, for the Engine API's put_archive at `/` (no command runs in
    the sandbox, so the image needs no `ln`)."""
    if not mount.links:
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        now = time.time()
        for path, target in sorted(mount.links.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mode = 0o777
            info.mtime = now
            tar.addfile(info)
    return buf.getvalue()


def links_script(mount: AgentMount, ln: str = "ln", mkdir: str = "mkdir") -> str:
    """The same links as shell (k8s, where files move over exec anyway)."""
    import posixpath
    import shlex

    lines = [f"{mkdir} -p {shlex.quote(posixpath.dirname(path))} && {ln} -sfn {shlex.quote(target)} "
             f"{shlex.quote(path)}" for path, target in sorted(mount.links.items())]
    return " && ".join(lines) or "true"


def agent_volumes(api, owner_uid: str | None = None) -> list[dict]:
    """The agent volumes on this docker host (of `owner_uid`, when given)."""
    filters: dict = {"label": [f"{AGENT_IMAGE}"]}
    if owner_uid is not None:
        filters["label"].append(f"{sandbox_labels.OWNER_UID}={owner_uid}")
    return list((api.volumes(filters=filters) or {}).get("Volumes") or [])


def stale_agent_volumes(api, owner_uid: str | None = None, project: str | None = None) -> list[str]:
    """Agent volumes no agent image names any more: their image was rebuilt, re-pinned or removed
    (the current volume of each agent image stays, used or not: the next sandbox needs it)."""
    import docker.errors

    stale = []
    for volume in agent_volumes(api, owner_uid):
        labels = volume.get("Labels") or {}
        if project and labels.get(sandbox_labels.PROJECT) != sandbox_labels.label_value(project):
            continue
        try:
            current = api.inspect_image(labels.get(AGENT_REF, ""))["Id"]
        except (docker.errors.ImageNotFound, docker.errors.NullResource, docker.errors.APIError):
            current = None
        if current != labels.get(AGENT_IMAGE):
            stale.append(volume["Name"])
    return stale


# ---- kubernetes ------------------------------------------------------------------------------
AGENT_VOLUME = "rlkit-agent"
AGENT_INIT = "rlkit-agent-fill"


def pod_agent_parts(mount: AgentMount, delivery: str, pull_policy: str = "IfNotPresent") -> dict:
    """The pod spec's pieces for the agent (`delivery`: image-volume or init-container): `volumes`, the
    main container's `volumeMounts` and, for an init container fill, `initContainers`. The main
    container's mount is read-only either way."""
    mounted = {"name": AGENT_VOLUME, "mountPath": mount.target, "readOnly": True}
    if delivery == "image-volume":
        volume = {"name": AGENT_VOLUME, "image": {"reference": mount.image, "pullPolicy": pull_policy}}
        return {"volumes": [volume], "volumeMounts": [mounted]}
    # The agent image is FROM the base image (its cp), and its tree sits at `target`: copy it whole.
    init = {"name": AGENT_INIT, "image": mount.image, "imagePullPolicy": pull_policy,
            "command": ["cp", "-a", f"{mount.target}/.", "/rlkit-agent-fill/"],
            "volumeMounts": [{"name": AGENT_VOLUME, "mountPath": "/rlkit-agent-fill"}]}
    return {"volumes": [{"name": AGENT_VOLUME, "emptyDir": {}}], "volumeMounts": [mounted], "initContainers": [init]}


_k8s_choices: dict[tuple[int, str], tuple[str, str]] = {}
_k8s_lock = threading.Lock()


def k8s_agent_delivery(core_api, namespace: str, image: str) -> tuple[str, str]:
    """(image-volume | init-container, why) for this API server: a server-side dry run of a pod with an
    image volume (nothing is created). A server without the ImageVolume feature drops the field or
    refuses it; then an init container fills an emptyDir. Asked once per client and namespace."""
    key = (id(core_api), namespace)
    with _k8s_lock:
        if key in _k8s_choices:
            return _k8s_choices[key]
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "rlkit-agent-volume-probe", "namespace": namespace},
             "spec": {"containers": [{"name": "probe", "image": image, "command": ["true"],
                                      "volumeMounts": [{"name": AGENT_VOLUME, "mountPath": "/probe",
                                                        "readOnly": True}]}],
                      "volumes": [{"name": AGENT_VOLUME, "image": {"reference": image,
                                                                    "pullPolicy": "IfNotPresent"}}],
                      "restartPolicy": "Never"}}
    try:
        answer = core_api.create_namespaced_pod(namespace, probe, dry_run="All", _preload_content=False,
                                                _request_timeout=10)
    except Exception as exc:  # noqa: BLE001 — any refusal of the probe means: no image volumes here
        choice = ("init-container", f"the API server refused an image volume ({_short(exc)})")
    else:
        kept = _volumes_of(answer)
        choice = (("image-volume", "the API server keeps image volumes (dry run)")
                  if any(isinstance(v, dict) and v.get("image") for v in kept)
                  else ("init-container", "the API server dropped the image volume (ImageVolume feature off)"))
    with _k8s_lock:
        _k8s_choices[key] = choice
    return choice


def _volumes_of(answer) -> list:
    import json

    data = getattr(answer, "data", None)
    pod = json.loads(data) if isinstance(data, bytes | str) else answer
    if not isinstance(pod, dict):
        return []
    return list((pod.get("spec") or {}).get("volumes") or [])


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", "") or exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]
