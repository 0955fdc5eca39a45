"""The model files an executor loads and the read-only mounts a container sees them through,
never a whole system tree. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.load_files import load_files, normal_path
from exedra_engine._core.struct import Value
from exedra_engine._core.values import LaunchPlan, ModelFile
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
_NEVER = ("/proc", "/sys", "/dev")
"""Trees no model file can come from."""


def loaded_files(
    p: ExecutorProfile,
    plan: LaunchPlan,
    args: Sequence[str],
    env: Sequence[tuple[str, str]],
) -> tuple[ModelFile, ...]:
    # From the argv, as the executor reads it; the sizes from the plan's own list (a plan
    # saved before it had one knows the model header's size only).
    sizes = {f.path: f.size for f in plan.files if f.size}
    files = load_files(p, args, [f"{n}={v}" for n, v in env], plan.model, sizes)
    for f in files:
        if not f.path.startswith("/"):
            raise EmitError(f"model file {f.path!r} is a relative path: plan with an absolute one")
        if f.path == "/" or f.path.startswith(tuple(d + "/" for d in _NEVER)):
            raise EmitError(f"model file {f.path!r} is not a file a model can be read from")
    return files


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _under(path: str, d: str) -> bool:
    return path.startswith(d.rstrip("/") + "/")


def mounts_for(
    files: Sequence[ModelFile], options: EmitOptions
) -> tuple[tuple[Mount, ...], tuple[Origin, ...]]:
    paths = [f.path for f in files]
    if options.models_dir:
        d = normal_path(options.models_dir)
        if d in SYSTEM_TOP:
            raise EmitError(f"--models-dir {d} would mount a whole system tree: give a deeper one")
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
    if common not in SYSTEM_TOP:
        why = f"the deepest directory holding every file the executor loads, mounted at {MOUNT}"
        return (Mount(host=common, container=MOUNT),), (
            Origin(field="models dir", value=common, source="plan", why=why),
        )
    return _mounts_apart(paths, common)


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
    paths: Sequence[str], common: str
) -> tuple[tuple[Mount, ...], tuple[Origin, ...]]:
    # One mount per distinct directory (a directory inside another rides along); a file
    # directly in a system tree is mounted alone, so the tree itself never is.
    dirs: list[str] = []
    for d in sorted({_parent(f) for f in paths}):
        if not any(d == x or _under(d, x) for x in dirs if x not in SYSTEM_TOP):
            dirs.append(d)
    out: list[Mount] = []
    for i, d in enumerate(dirs):
        at = f"{MOUNT}/{i}"
        if d not in SYSTEM_TOP:
            out.append(Mount(host=d, container=at))
            continue
        for f in paths:
            if _parent(f) == d:
                out.append(Mount(host=f, container=f"{at}/{f.rsplit('/', 1)[1]}", is_file=True))
    why = (
        f"the files' common directory is {common}, which is never mounted: one read-only "
        "mount per directory (a file in a system tree alone)"
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
