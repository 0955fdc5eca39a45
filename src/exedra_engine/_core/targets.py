"""The names `exedra_engine._core.emit` renders for: its targets, the Kubernetes model
storages and the Quadlet SELinux labels. Apart from the emitter so that the command line
offers them as choices without loading it (a plain ``plan`` never emits)."""

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


class Selinux(enum.StrEnum):
    """Quadlet: how the model bind is labelled on an SELinux host."""

    NONE = ""
    """No label option: right where SELinux is off, or the models are labelled already."""
    SHARED = "shared"
    """``:z``: relabel the models for every container (they are read-only)."""
    PRIVATE = "private"
    """``:Z``: relabel the models for this container only."""
    DISABLE = "disable"
    """``SecurityLabelDisable=true``: no separation for this container."""
