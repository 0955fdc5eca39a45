"""The choices a plan does not make (`EmitOptions`), checked; and `Origin`, where one emitted
field came from. Pure."""

from __future__ import annotations

from exedra_engine._core.emit import names
from exedra_engine._core.struct import Value
from exedra_engine._core.targets import Selinux, Storage, Target
from exedra_engine.constants import STOP_TIMEOUT


class EmitOptions(Value, frozen=True, kw_only=True, omit_defaults=True):
    """The choices a plan does not make. Zero values are derived (see `Origin` for how)."""

    name: str = ""
    """Object, unit and file name; "" = the model id, else the model file's stem."""
    image: str = ""
    """Container image; "" = the executor's published image for the plan's backend. A digest
    (``@sha256:...``) pins the build the plan was checked against."""
    image_command: str = ""
    """The executor's path in the image; "" = the profile's."""
    secret: str = ""
    """The Kubernetes Secret or Podman secret holding the key; "" = NAME-api-key."""
    key_file: str = ""
    """systemd: the key file the credential is loaded from; "" = /etc/exedra/NAME.key."""
    storage: Storage = Storage.PVC
    claim: str = ""
    """Kubernetes: the PersistentVolumeClaim holding the model directory; "" = NAME-models."""
    models_image: str = ""
    """Kubernetes: the image whose files are the model directory (with storage "image")."""
    models_dir: str = ""
    """The host directory that holds every model file; "" = derived (see `Mount`)."""
    namespace: str = ""
    uid: int = 65532
    """Kubernetes and Quadlet: the numeric user (and group) the container runs as; never 0
    (a restricted pod; a rootful Podman container would otherwise run as the host's root)."""
    gpu_groups: tuple[int, ...] = ()
    """Kubernetes: supplementary groups of the pod (the node's ``render`` gid: AMD and Intel
    device nodes are ``root:render 0660``)."""
    stop_timeout: float = STOP_TIMEOUT
    """Seconds the executor gets after SIGTERM before it is killed."""
    start_budget: int = 0
    """Seconds a start may take before it counts as failed; 0 = sized from the model."""
    gpu_resource: str = ""
    """Kubernetes: the GPU's extended resource; "" = by the probed driver."""
    gpu_count: int = 0
    """GPUs to ask for; 0 = every GPU of the chosen driver in the hardware file."""
    waiter: str = "/usr/bin/exedra-engine"
    """systemd: the exedra-engine whose ``wait-ready`` the unit's ExecStartPost runs (the
    command line gives its own real path)."""
    publish_address: str = "127.0.0.1"
    """Quadlet: the host address the port is published on ("" = every address)."""
    selinux: Selinux = Selinux.NONE
    """Quadlet: the SELinux label option of the model binds."""
    real_paths: tuple[tuple[str, str], ...] = ()
    """(path, where it resolves on this machine) for the plan's paths and their directories
    that are links (the command line fills it: emitting is pure). A model directory is judged
    by what it is as well as by its spelling: ``/data/m`` linked to ``/home/alice`` is a
    home, never mounted whole. Paths not here are judged as spelled."""


class Origin(Value, frozen=True, kw_only=True):
    """Where one emitted field came from: one decision of the shaping, as data (``emit
    --explain`` renders it)."""

    field: str
    value: str
    source: str
    """``plan``, ``probe``, ``option`` or ``default``."""
    why: str = ""
    """The reason, for a value the source alone does not explain ("": none needed)."""
    layer: str = ""
    """For a plan field that a layer's flag or variable set (by its key or name in the
    plan's provenance, whatever spelling the layer wrote): that layer ("": none known)."""


def check_options(options: EmitOptions, target: Target) -> None:
    """Raise `EmitError` for the first option no target would accept (the command line
    refuses them while parsing; this holds for library callers)."""
    if options.name:
        names.label(options.name, "name", service=True)
    if options.namespace:
        names.label(options.namespace, "namespace")
    for value, what in ((options.secret, "secret"), (options.claim, "claim")):
        if value:
            names.subdomain(value, what)
    if target is Target.K8S:
        names.non_root_uid(options.uid, "uid")
    for gid in options.gpu_groups:
        names.non_root_uid(gid, "gpu group")
    names.non_negative(options.gpu_count, "gpu count")
    names.non_negative(options.start_budget, "start budget")
    names.address(options.publish_address, "publish address")
    for value, what in ((options.image, "image"), (options.models_image, "models image")):
        if value:
            names.image(value, what)
    if options.gpu_resource:
        names.resource(options.gpu_resource, "gpu resource")
    for value, what in (
        (options.image_command, "image command"),
        (options.key_file, "key file"),
        (options.models_dir, "models dir"),
        (options.waiter, "waiter"),
    ):
        names.absolute_path(value, what)


def chosen(field: str, value: str, option: str, why: str) -> Origin:
    """A field an option sets, else a default whose reason is `why`."""
    if option:
        return Origin(field=field, value=value, source="option")
    return Origin(field=field, value=value, source="default", why=why)
