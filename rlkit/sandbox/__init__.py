"""Sandboxes: one container (docker) or pod (k8s) per trial, as harbor `BaseEnvironment`s.

    from harbor.models.trial.config import EnvironmentConfig
    EnvironmentConfig(import_path=IMPORT_PATHS["docker"],
                      kwargs={"project": P, "experiment": E, "step": N, "session": S,
                              "network": "host"})          # see DockerOptions / K8sOptions

- `docker.DockerEnvironment`: Engine API (docker SDK) on the shared thread pool; the task
  image `rlkit-task/<task>:latest` is built from environment/Dockerfile when missing or
  built from other sources (`images.source_digest`).
- `tamper`: what a verifier must know of an image (probed at sandbox start, cached), the
  changes an agent left, and their judgement (`docs/grading.md`).
- `k8s.KubernetesEnvironment`: pod per trial, exec over the stream API, tar over exec;
  the pod manifest comes from the pure `k8s_spec`.
- `images` builds the task images `rlkit.tasks.images` names; `base_image` builds `rlkit/base:bookworm`
  offline; `dockerd.ensure_dockerd` starts a daemon when none answers.
- Every sandbox carries the `labels` (rlkit.managed, project, experiment, step, session)
  that `rlkit cleanup` (rlkit/ops/cleanup.py) reaps by.
- A command past its timeout raises `timeouts.SandboxExecTimeout` (also a TimeoutError).

Heavy clients (docker, kubernetes, harbor) are imported only by the backend modules.
"""

from __future__ import annotations

import ipaddress

from rlkit.registry import Registry

BACKENDS: Registry[type] = Registry("sandbox backend")
BACKENDS.register("docker", "rlkit.sandbox.docker:DockerEnvironment")
BACKENDS.register("k8s", "rlkit.sandbox.k8s:KubernetesEnvironment")

# import_path harbor's TrialEnvironmentConfig takes for each backend.
IMPORT_PATHS: dict[str, str] = {
    "docker": "rlkit.sandbox.docker:DockerEnvironment",
    "k8s": "rlkit.sandbox.k8s:KubernetesEnvironment",
}

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """An allowlist entry (name, address or CIDR) that means this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_network(host, strict=False).is_loopback
    except ValueError:
        return False
