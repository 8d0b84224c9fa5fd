"""The docker sandbox for agents that run inside it and call the proxy on the host.

harbor's Trial adds an in-container agent's inference host (the proxy) to the task's
network policy: a `no-network` task becomes an allowlist of that one host, and harbor
rejects a sandbox that does not declare allowlist support. On one machine the proxy
listens on 127.0.0.1, which a container reaches only with host networking. So this
backend accepts allowlists of loopback hosts only and serves them with network mode
`host`; any other allowlist is rejected, as harbor asks of a backend that cannot
enforce it. Host networking does not filter other egress: it relies on the host's own
egress policy (on the machines rlkit targets only loopback is routable for sandboxes).
On k8s the backend turns the allowlist into a NetworkPolicy of ipBlocks (see rlkit.sandbox.k8s).
"""

from __future__ import annotations

from typing import Any

from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

from rlkit.sandbox import is_loopback
from rlkit.sandbox.docker import DockerEnvironment, DockerNetwork


class ProxyDockerEnvironment(DockerEnvironment):
    """`DockerEnvironment` that serves a loopback-only allowlist (the proxy) with host networking."""

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return super().capabilities.model_copy(update={
            "network_allowlist": True, "network_allowlist_hostnames": True,
            "network_allowlist_ipv4_addresses": True, "network_allowlist_ipv6_addresses": True})

    def validate_network_policy_support(self, network_policy: Any = None) -> None:
        super().validate_network_policy_support(network_policy)
        policy = network_policy or self.network_policy
        if policy.network_mode != NetworkMode.ALLOWLIST:
            return
        outside = [host for host in policy.allowed_hosts if not is_loopback(host)]
        if outside:
            raise ValueError(
                f"{self.type()} can only allow loopback hosts (a proxy on this machine), not {outside}. "
                "Environment providers must enforce the requested network policy or reject the task.")

    def network_mode(self) -> DockerNetwork:
        if self.opts.network is None and self.network_policy.network_mode == NetworkMode.ALLOWLIST:
            return "host"
        return super().network_mode()
