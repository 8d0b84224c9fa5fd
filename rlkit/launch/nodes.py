"""Which node is rank 0: this node's addresses against RAY_HEAD_ADDRESS.

Every node runs the same config. The node that owns the head's address is rank 0: it
starts the Ray head and the trainer; every other node joins as a Ray worker. A head given
as a hostname is resolved first, so it is printed and compared as an address. NODE_IP
names this node's address where detection cannot (a pod's host IP, or several nodes
sharing one host on loopback aliases); otherwise the addresses of this host's interfaces
(psutil) are used.
"""

from __future__ import annotations

import ipaddress
import socket

from rlkit.errors import UserError

LOOPBACK_NAMES = {"", "localhost", "127.0.0.1", "::1"}


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def resolve_host(host: str, *, key: str = "RAY_HEAD_ADDRESS") -> str:
    """An address for `host` (an address stays as it is); a name that does not resolve is the user's error."""
    if not host or is_ip(host):
        return host
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET)
    except OSError as exc:
        raise UserError(f"{key}={host} does not resolve: {exc}", key=key,
                        fix="give the head node's IP address, or a name every node can resolve") from exc
    return str(infos[0][4][0])


def local_addresses() -> set[str]:
    """Every address of this host's interfaces, plus 127.0.0.1."""
    import psutil

    out = {"127.0.0.1"}
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.add(addr.address.split("%")[0])
    return out


def is_rank0(head_address: str, node_ip: str = "", addresses: set[str] | None = None) -> bool:
    """Is this node the head? An empty head means a one-node run (this node)."""
    head = resolve_host(head_address)
    if not head:
        return True
    if node_ip:
        return resolve_host(node_ip, key="NODE_IP") == head
    if head in LOOPBACK_NAMES:
        return True
    return head in (addresses if addresses is not None else local_addresses())


def this_node_address(head_address: str, node_ip: str = "") -> str:
    """The address this node announces to Ray and serves the proxy on: NODE_IP, else the
    source address the kernel picks towards the head (sends nothing), else loopback."""
    if node_ip:
        return resolve_host(node_ip, key="NODE_IP")
    head = resolve_host(head_address)
    if not head or head in LOOPBACK_NAMES or ipaddress.ip_address(head).is_loopback:
        return head or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((head, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def has_nvidia_gpu() -> bool:
    """Does this machine show an NVIDIA driver (where verl's GPU processes can run)?"""
    from pathlib import Path

    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists()
