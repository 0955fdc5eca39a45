"""The model files an executor loads and the read-only mounts a container sees them through,
never a whole system tree. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.plan.launch_plan import LaunchPlan, PlanReading
from exedra_engine._core.plan.load_files import normal_path
from exedra_engine._core.struct import Value
from exedra_engine._core.values import ModelFile
from exedra_engine.errors import EmitError


class Mount(Value, frozen=True, kw_only=True):
    """One host directory (or file) a container sees, read-only."""

    host: str
    container: str
    is_file: bool = False


MOUNT = "/models"
"""Where containers see the model directory."""

SYSTEM_TOP = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /nix /opt /proc "
    "/root /run /sbin /snap /srv /sys /tmp /usr /var".split()
)
"""Directories never mounted whole: the root and the top-level system trees."""
_HOLDERS = ("/home", "/var/home", "/usr", "/usr/local", "/var")
"""Directories whose every child is never mounted whole either: each home (its ``.ssh`` and
``.gnupg`` beside the model) and system trees (``/var/lib``, ``/usr/local``)."""
NO_MODEL_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc",
    "/run",
    "/var/run",
    "/var/lock",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/containerd",
    "/var/lib/kubelet",
)
"""Trees no model file is read from: the kernel's, devices, configuration and keys (``/etc``,
``/etc/ssl/private``), runtime state and sockets (``/run/secrets``, ``/var/run/docker.sock``),
the container runtimes' own storage. A file there is refused, not mounted."""
SECRET_DIRS = frozenset(
    ".ssh .gnupg .aws .azure .kube .docker .password-store .netrc .git-credentials".split()
)
"""Directory names that hold keys, wherever they are: a file under one is refused."""


def no_model_tree(path: str) -> str:
    """The tree `path` (normalised, absolute) lies in that no model file is read from, or ""."""
    for d in NO_MODEL_TREES:
        if path == d or _under(path, d):
            return d
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part in SECRET_DIRS:
            return "/".join(parts[: i + 1])
    return ""


def never_whole(path: str) -> bool:
    """Whether the directory `path` (normalised) is never mounted whole: a system, runtime,
    secret or home tree (by what it is, for a path resolved, or as spelled)."""
    return path in SYSTEM_TOP or _parent(path) in _HOLDERS or bool(no_model_tree(path))


def loaded_files(plan: LaunchPlan, reading: PlanReading) -> tuple[ModelFile, ...]:
    """The files the plan loads: from its reading (its argv and env, as the executor reads
    them); the sizes from the plan's own list (a plan saved before it had one knows the
    model header's size only)."""
    sizes = {f.path: f.size for f in plan.files if f.size}
    files = tuple(
        ModelFile(path=f.path, size=sizes.get(f.path) or f.size, role=f.role) for f in reading.files
    )
    for f in files:
        if not f.path.startswith("/"):
            raise EmitError(f"model file {f.path!r} is a relative path: plan with an absolute one")
        if f.path == "/":
            raise EmitError(f"model file {f.path!r} is not a file a model can be read from")
    return files


def mount_problem(source: str, *, is_file: bool | None = None) -> str:
    """What is wrong with a mount whose host side is `source`, read back from an emitted
    file (by spelling: the files are judged where they are read, maybe not on the host):
    "" when nothing. `is_file` None: not known whether it is a file or a directory."""
    path = normal_path(source) if source.startswith("/") else source
    if tree := no_model_tree(path):
        return f"the host's {source}: in {tree}, a system, runtime or secret tree"
    whole = path in {*SYSTEM_TOP, ""} if is_file is not False else never_whole(path)
    return f"the host's {source}: a whole system tree, or a home" if whole else ""


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _under(path: str, d: str) -> bool:
    return path.startswith(d.rstrip("/") + "/")


def mounts_for(
    files: Sequence[ModelFile], options: EmitOptions
) -> tuple[tuple[Mount, ...], tuple[Origin, ...]]:
    """The read-only mounts that show a container every file in `files`: the model's own
    directory, never a system, runtime, secret or home tree. Each path is judged as spelled
    and as it resolves (`EmitOptions.real_paths`, which the command line fills): a link
    spelled ``/data/m`` to ``/`` is the root."""
    real = dict(options.real_paths)
    paths = [f.path for f in files]
    for f in paths:
        _refuse_no_model_tree(f, real)
    if options.models_dir:
        d = normal_path(options.models_dir)
        if _never_whole(d, real):
            raise EmitError(
                f"--models-dir {d}{_resolved(d, real)} would mount a whole system tree (or a "
                "runtime, secret or home tree): give the models' own directory"
            )
        for f in paths:
            if not _under(f, d):
                raise EmitError(f"model file {f} is not under --models-dir {d}")
        why = f"mounted read-only at {MOUNT}"
        return (Mount(host=d, container=MOUNT),), (
            Origin(field="models dir", value=d, source="option", why=why),
        )
    if not paths:
        return (), ()
    common = _common_dir(paths)
    if not _never_whole(common, real):
        why = f"the deepest directory holding every file the executor loads, mounted at {MOUNT}"
        return (Mount(host=common, container=MOUNT),), (
            Origin(field="models dir", value=common, source="plan", why=why),
        )
    return _mounts_apart(paths, common, real)


def _real(path: str, real: dict[str, str]) -> str:
    """Where `path` resolves: by its deepest directory (or itself) that `real` names."""
    at = path
    while at not in real:
        if at in ("/", ""):
            return path
        at = at.rsplit("/", 1)[0] or "/"
    return normal_path(real[at] + "/" + path[len(at) :])


def _resolved(path: str, real: dict[str, str]) -> str:
    to = _real(path, real)
    return f" (which resolves to {to})" if to != path else ""


def _never_whole(d: str, real: dict[str, str]) -> bool:
    return never_whole(d) or never_whole(_real(d, real))


def _refuse_no_model_tree(path: str, real: dict[str, str]) -> None:
    for p in dict.fromkeys((path, _real(path, real))):
        if tree := no_model_tree(p):
            raise EmitError(
                f"model file {path}{_resolved(path, real)} is in {tree}, a system, runtime or "
                "secret tree no model is read from: nothing there is mounted"
            )


def _common_dir(paths: Sequence[str]) -> str:
    dirs = [_parent(f).split("/") for f in paths]
    common = dirs[0]
    for parts in dirs[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return "/".join(common) or "/"


def _mounts_apart(
    paths: Sequence[str], common: str, real: dict[str, str]
) -> tuple[tuple[Mount, ...], tuple[Origin, ...]]:
    # One mount per distinct directory (a directory inside another rides along); a file
    # directly in a tree never mounted whole is mounted alone, so the tree itself never is.
    dirs: list[str] = []
    for d in sorted({_parent(f) for f in paths}):
        if not any(d == x or _under(d, x) for x in dirs if not _never_whole(x, real)):
            dirs.append(d)
    out: list[Mount] = []
    for i, d in enumerate(dirs):
        at = f"{MOUNT}/{i}"
        if not _never_whole(d, real):
            out.append(Mount(host=d, container=at))
            continue
        for f in paths:
            if _parent(f) == d:
                out.append(Mount(host=f, container=f"{at}/{f.rsplit('/', 1)[1]}", is_file=True))
    why = (
        f"the files' common directory is {common}{_resolved(common, real)}, which is never "
        "mounted: one read-only mount per directory (a file in a system tree alone)"
    )
    value = " ".join(f"{m.host}={m.container}" for m in out)
    return tuple(out), (Origin(field="models dir", value=value, source="plan", why=why),)


def in_container(path: str, mounts: Sequence[Mount]) -> str:
    """Where a container sees the model file `path` (the path itself when no mount has it)."""
    n = normal_path(path)
    for m in mounts:
        if n == m.host and m.is_file:
            return m.container
        if not m.is_file and _under(n, m.host):
            return m.container + n[len(m.host.rstrip("/")) :]
    return path
