"""Sandboxes: docker and kubernetes backends (harbor `BaseEnvironment` subclasses),
the offline base image, task images and labels. Heavy clients are imported lazily.

Backends by name (for configs that say BACKEND=docker|k8s):
"""

from __future__ import annotations

from rlkit.registry import Registry

BACKENDS: Registry[type] = Registry("sandbox backend")
BACKENDS.register("docker", "rlkit.sandbox.docker:DockerEnvironment")
BACKENDS.register("k8s", "rlkit.sandbox.k8s:KubernetesEnvironment")

# import_path harbor's TrialEnvironmentConfig takes for each backend.
IMPORT_PATHS: dict[str, str] = {
    "docker": "rlkit.sandbox.docker:DockerEnvironment",
    "k8s": "rlkit.sandbox.k8s:KubernetesEnvironment",
}
