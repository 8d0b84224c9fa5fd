"""Pure builders for the kubernetes backend: pod manifest, deny-all and allowlist network
policies, label selectors and the shell wrapping of an exec (k8s exec has no cwd/env/user).

Plain dicts, no kubernetes import: the client accepts dict bodies, and these are
unit-tested without a cluster.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from rlkit.sandbox._exec_kill import KILL_TREE_BASH

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
MAIN_CONTAINER = "main"
NETWORK_LABEL = "rlkit.network"
NO_NETWORK_POLICY = "rlkit-no-network"
_BAD_POD = re.compile(r"[^a-z0-9-]+")


def pod_name(session_id: str, suffix: str) -> str:
    """A DNS-1123 pod name (≤63 chars) from harbor's session id and a random suffix."""
    stem = _BAD_POD.sub("-", session_id.lower()).strip("-")[: 63 - len("rlkit--") - len(suffix)]
    return f"rlkit-{stem.strip('-') or 'trial'}-{suffix}"


def label_selector(labels: dict[str, str]) -> str:
    """`k=v,k2=v2` for list calls."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass(frozen=True)
class PodResources:
    """CPU/memory/storage requests and limits; None leaves the field out."""

    cpu_request: float | None = None
    cpu_limit: float | None = None
    memory_request_mb: int | None = None
    memory_limit_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0

    def as_dict(self) -> dict[str, dict[str, str]]:
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if self.cpu_request:
            requests["cpu"] = _cpu(self.cpu_request)
        if self.cpu_limit:
            limits["cpu"] = _cpu(self.cpu_limit)
        if self.memory_request_mb:
            requests["memory"] = f"{int(self.memory_request_mb)}Mi"
        if self.memory_limit_mb:
            limits["memory"] = f"{int(self.memory_limit_mb)}Mi"
        if self.storage_mb:
            requests["ephemeral-storage"] = limits["ephemeral-storage"] = f"{int(self.storage_mb)}Mi"
        if self.gpus:
            limits["nvidia.com/gpu"] = str(self.gpus)
        out: dict[str, dict[str, str]] = {}
        if requests:
            out["requests"] = requests
        if limits:
            out["limits"] = limits
        return out


def _cpu(value: float) -> str:
    millis = round(float(value) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


@dataclass(frozen=True)
class PodSpecInput:
    name: str
    namespace: str
    image: str
    labels: dict[str, str]
    resources: PodResources = PodResources()
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    pull_policy: PullPolicy = "IfNotPresent"
    no_network: bool = False
    allowed_hosts: tuple[str, ...] = ()  # egress allowlist (IPs and CIDRs); ingress stays closed
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict, ...] = ()
    active_deadline_sec: int | None = None
    hostname: str | None = None  # the pod's hostname (rlkit.sandbox._identity.sandbox_hostname); None: its name
    # The mounted agent (rlkit.sandbox.agent_volume.pod_agent_parts): volumes, the main container's
    # volumeMounts, initContainers.
    agent: dict = field(default_factory=dict)


def build_pod_manifest(spec: PodSpecInput) -> dict:
    """One pod per trial: a `sleep infinity` main container the backend execs into."""
    labels = dict(spec.labels)
    if spec.no_network:
        labels[NETWORK_LABEL] = "none"
    elif spec.allowed_hosts:
        labels[NETWORK_LABEL] = allowlist_label(spec.allowed_hosts)
    container: dict = {
        "name": MAIN_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.pull_policy,
        "command": ["sleep", "infinity"],
    }
    if spec.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    if spec.workdir:
        container["workingDir"] = spec.workdir
    resources = spec.resources.as_dict()
    if resources:
        container["resources"] = resources
    pod_spec: dict = {
        "containers": [container],
        "restartPolicy": "Never",
        # Sandboxes are disposable: delete at once, no token for the agent to find.
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if spec.agent.get("volumeMounts"):
        container["volumeMounts"] = list(spec.agent["volumeMounts"])
        pod_spec["volumes"] = list(spec.agent["volumes"])
    if spec.agent.get("initContainers"):
        pod_spec["initContainers"] = list(spec.agent["initContainers"])
    if spec.hostname:  # as on docker: one task's pods show the agent the same prompt
        pod_spec["hostname"] = spec.hostname
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.active_deadline_sec:
        # A leaked pod dies by itself even if no reaper ever runs.
        pod_spec["activeDeadlineSeconds"] = int(spec.active_deadline_sec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": pod_spec,
    }


def no_network_policy_manifest(namespace: str) -> dict:
    """Deny all ingress and egress for pods labelled rlkit.network=none."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NO_NETWORK_POLICY, "namespace": namespace, "labels": {"rlkit.managed": "1"}},
        "spec": {"podSelector": {"matchLabels": {NETWORK_LABEL: "none"}}, "policyTypes": ["Ingress", "Egress"]},
    }


def allowlist_cidrs(hosts: tuple[str, ...] | list[str]) -> list[str]:
    """Allowlist entries as CIDRs (an address is its /32 or /128). Raises ValueError on a hostname:
    a NetworkPolicy matches addresses, not names."""
    return sorted({str(ipaddress.ip_network(host.strip("[]"), strict=False)) for host in hosts})


def allowlist_label(hosts: tuple[str, ...] | list[str]) -> str:
    """The rlkit.network label of pods that share one allowlist: `allow-<digest>`."""
    return "allow-" + hashlib.sha256(",".join(allowlist_cidrs(hosts)).encode()).hexdigest()[:12]


def allowlist_policy_manifest(namespace: str, hosts: tuple[str, ...] | list[str]) -> dict:
    """Egress only to `hosts`, no ingress, for pods labelled with `allowlist_label(hosts)`."""
    label = allowlist_label(hosts)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"rlkit-{label}", "namespace": namespace, "labels": {"rlkit.managed": "1"}},
        "spec": {"podSelector": {"matchLabels": {NETWORK_LABEL: label}}, "policyTypes": ["Ingress", "Egress"],
                 "egress": [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in allowlist_cidrs(hosts)]}]},
    }


def wrap_exec(command: str, cwd: str | None = None, env: dict[str, str] | None = None,
              user: str | int | None = None, pid_file: str | None = None,
              tool: Callable[[str], str] = str) -> list[str]:
    """argv for a k8s exec that runs `command` in bash with cwd, env and user applied.

    `pid_file` records the shell's pid so a timed-out command's tree can be killed; `tool`
    names a binary by its absolute path in the image (once the image is profiled)."""
    bash = tool("bash")
    # The command runs as its own bash so its `;`/`||` can't escape the && chain above it.
    inner = f"{bash} -c {shlex.quote(command)}"
    if user is not None and str(user) not in {"root", "0"}:
        if str(user).isdigit():
            inner = (f"{tool('setpriv')} --reuid={user} --regid={user} --clear-groups "
                     f"{bash} -c {shlex.quote(command)}")
        else:
            inner = f"{tool('runuser')} -u {shlex.quote(str(user))} -- {bash} -c {shlex.quote(command)}"
    parts = []
    if pid_file:
        quoted = shlex.quote(pid_file)
        parts += [f"echo $$ > {quoted}", f"trap {shlex.quote(f'rm -f {quoted}')} EXIT"]
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)}")
    if env:
        parts.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())))
    parts.append(inner)
    return [bash, "-c", " && ".join(parts)]


def kill_tree_command(pid_file: str, tool: Callable[[str], str] = str) -> list[str]:
    """argv that SIGKILLs the process recorded in `pid_file` and all its descendants.

    Pure bash over /proc (no procps needed in the image)."""
    quoted = shlex.quote(pid_file)
    script = KILL_TREE_BASH + f"[ -f {quoted} ] && kill_tree \"$(< {quoted})\"; {tool('rm')} -f {quoted}"
    return [tool("bash"), "-c", script]


def upload_command(size_b64: int, tool: Callable[[str], str] = str) -> list[str]:
    """argv that reads exactly `size_b64` base64 bytes of a tar from stdin and unpacks it at /.

    Reading a known length avoids needing stdin EOF, which the exec websocket can't send."""
    return [tool("bash"), "-c", f"{tool('head')} -c {int(size_b64)} | {tool('base64')} -d | {tool('tar')} xf - -C /"]


def download_command(path: str, tool: Callable[[str], str] = str) -> list[str]:
    """argv that writes a base64 tar of `path` (its last component at the archive's top)."""
    parent, _, name = path.rstrip("/").rpartition("/")
    return [tool("bash"), "-c",
            f"{tool('tar')} cf - -C {shlex.quote(parent or '/')} {shlex.quote(name)} | {tool('base64')} -w0"]
