"""The names `exedra_engine._core.emit` renders for: its targets and the Kubernetes model
storages. Apart from the emitter so that the command line offers them as choices without
loading it (a plain ``plan`` never emits)."""

from __future__ import annotations

import enum


class Target(enum.StrEnum):
    """Where a plan is emitted for."""

    K8S = "k8s"
    """A Kubernetes Deployment and Service."""
    SYSTEMD = "systemd"
    """A systemd service that runs the executor itself."""
    QUADLET = "quadlet"
    """A Podman Quadlet ``.container`` unit."""


class Storage(enum.StrEnum):
    """Where a container finds the model files (Kubernetes)."""

    PVC = "pvc"
    IMAGE = "image"
    HOST = "host"
