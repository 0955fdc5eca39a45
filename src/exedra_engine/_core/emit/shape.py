"""What every target needs to know about a plan, derived once, with where each part came from.

A `Shape` is the plan as a deployment sees it: the argv and env without any key (the key
comes from a mounted file), the model files and the directory to mount, the GPU the plan
runs on and its resource name, the start and stop budgets. The targets (`k8s`, `systemd`,
`quadlet`) only lay it out. Pure and host-blind: every fact is the plan's, the hardware
file's, or an option's, and `Origin` records which.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from exedra_engine._core.emit import names
from exedra_engine._core.emit.memory import MemoryLimits, memory_limits
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import BUILTIN, ExecutorProfile, Executors
from exedra_engine._core.launch.budget import START_BASE, START_RATE, START_UNKNOWN, load_budget
from exedra_engine._core.plan.endpoint import env_dict, resolve
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.plan.load_files import load_files, normal_path
from exedra_engine._core.secrets import is_secret_name
from exedra_engine._core.struct import Value, freeze
from exedra_engine._core.targets import Selinux, Storage, Target
from exedra_engine._core.values import Hardware, LaunchPlan, ModelFile
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EmitError, EngineError


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
    """Kubernetes: the numeric user (and group) the pod runs as; never 0 (restricted)."""
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


class Gpu(Value, frozen=True, kw_only=True):
    driver: str
    backend: str
    count: int
    resource: str
    """The Kubernetes extended resource ("" when none is known for the driver)."""


class Mount(Value, frozen=True, kw_only=True):
    """One host directory (or file) a container sees, read-only."""

    host: str
    container: str
    is_file: bool = False


class Shape(Value, frozen=True, kw_only=True):
    """A plan as a deployment sees it (see the module docstring)."""

    plan: LaunchPlan
    profile: ExecutorProfile
    name: str
    args: tuple[str, ...]
    """The plan's argv without key flags; model files not yet rewritten."""
    env: tuple[tuple[str, str], ...]
    """The plan's env without key variables."""
    keyed: bool
    files: tuple[ModelFile, ...]
    """Every file the executor reads at load (shards, projector, draft included)."""
    mounts: tuple[Mount, ...]
    gpu: Gpu | None
    needs: tuple[tuple[str, str], ...]
    """(need, the flag asking it) for what a hardened unit denies by default
    (`ExecutorProfile.resource_flags`)."""
    memory: MemoryLimits | None
    """Memory settings from the plan's memory (`exedra_engine._core.emit.memory`)."""
    threads: int
    """The threads the plan sets (its threads flag); 0 = the executor's default."""
    start_budget: int
    stop_timeout: int
    image: str
    image_command: str
    secret: str
    key_file: str
    origins: tuple[Origin, ...]

    @property
    def model_files(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)


MOUNT = "/models"
"""Where containers see the model directory."""
KEY_DIR = "/run/secrets/exedra"
"""Where containers see the key (a directory: a Secret volume mounts one)."""
KEY_NAME = "api-key"
"""The key's file name: the Secret's key, the credential's name."""

# The extended resource a device plugin advertises for each kernel driver (NVIDIA's and AMD's
# plugins, Intel's GPU plugin: one resource per driver). Other drivers have none known.
GPU_RESOURCES = freeze(
    {
        "nvidia": "nvidia.com/gpu",
        "amdgpu": "amd.com/gpu",
        "i915": "gpu.intel.com/i915",
        "xe": "gpu.intel.com/xe",
    }
)
# The drivers each GGML GPU backend drives, most specific backend first; vulkan drives any.
BACKEND_DRIVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda", ("nvidia",)),
    ("hip", ("amdgpu",)),
    ("sycl", ("xe", "i915")),
    ("musa", ("mtgpu",)),
    ("vulkan", ("nvidia", "amdgpu", "xe", "i915")),
)

SYSTEM_TOP = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /nix /opt /proc "
    "/root /run /sbin /snap /srv /sys /tmp /usr /var".split()
)
"""Directories never mounted whole: the root and the top-level system trees."""
_NEVER = ("/proc", "/sys", "/dev")
"""Trees no model file can come from."""


def shape(
    plan: LaunchPlan,
    target: Target,
    options: EmitOptions,
    hardware: Hardware | None,
    sources: Sequence[Source] = (),
    *,
    executors: Executors = BUILTIN,
) -> Shape:
    """Derive the `Shape`, raising `EmitError` for what cannot be emitted as asked."""
    p = executors.profile(plan.spec.kind)
    check_options(options, target)
    _check_plan(p, plan)
    name, named = _name(plan, options)
    items = p.flags.split_items(plan.args, "plan args")
    keyed, args = _without_keys(p, plan, items)
    env = _env_without_keys(p, plan)
    key = _key_origin(p, keyed)
    files = _files(p, plan, args, env)
    mounts, mounted = _mounts(files, options)
    gpu, gpu_origins = _gpu(p, plan, items=items, env=env, hw=hardware, options=options)
    container = target is not Target.SYSTEMD
    if container:
        _check_container_host(p, plan)
    image, image_command, imaged = _image(p, gpu, options) if container else ("", "", ())
    start, started = _start_budget(files, options)
    stop, stopped = _stop_timeout(options)
    secret = options.secret or f"{name}-{KEY_NAME}"
    key_file = options.key_file or f"/etc/exedra/{name}.key"
    secrets = _secret_origins(keyed, target, options, (secret, key_file))
    memory, remembered = _memory(plan)
    return Shape(
        plan=plan,
        profile=p,
        name=name,
        args=args,
        env=env,
        keyed=keyed,
        files=files,
        mounts=mounts,
        gpu=gpu,
        needs=_needs(p, p.flags.split_items(args, "plan args"), env),
        memory=memory,
        threads=_threads(p, items),
        start_budget=start,
        stop_timeout=stop,
        image=image,
        image_command=image_command,
        secret=secret,
        key_file=key_file,
        origins=(
            named,
            *key,
            *mounted,
            *gpu_origins,
            *imaged,
            started,
            stopped,
            *secrets,
            *_endpoint_origins(p, plan, sources),
            remembered,
        ),
    )


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


def ready_problem(p: ExecutorProfile, plan: LaunchPlan) -> str:
    """Why `plan.ready` is not the profile's ready path under the plan's own prefix ("" when
    it is): a tampered ``/v1/models`` answers while the model loads."""
    want = expected_ready(p, plan.args, plan.env)
    if plan.ready != want:
        return (
            f"the plan's ready path {plan.ready!r} is not {want!r}, the profile's ready "
            "path under the prefix its argv and env set"
        )
    if not _URL_PATH.fullmatch(want):
        return f"the ready path {want!r} is not a plain URL path"
    return ""


_URL_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)+")


def expected_ready(p: ExecutorProfile, args: Sequence[str], env: Sequence[str]) -> str:
    """The ready path the executor serves for `args` and `env` (its prefix flag, else its
    prefix variable, then the profile's path)."""
    prefix = ""
    try:
        items = p.flags.split_items(args, "plan args")
    except EngineError:
        items = ()
    given = [it for it in items if it.key == p.ready_prefix_flag and it.values]
    if given:
        prefix = given[-1].values[0]
    elif p.ready_prefix_env:
        prefix = env_dict(env).get(p.ready_prefix_env, "")
    return prefix.rstrip("/") + p.ready_path


def _check_plan(p: ExecutorProfile, plan: LaunchPlan) -> None:
    names.port(plan.port, "the plan's port")
    problem = ready_problem(p, plan)
    if problem:
        raise EmitError(problem)


def _key_origin(p: ExecutorProfile, keyed: bool) -> tuple[Origin, ...]:
    if keyed and not p.key_file_flag:
        raise EmitError(f"{p.binary} reads no key file: a keyed plan cannot be emitted without it")
    if not keyed:
        return ()
    why = f"the plan is keyed; the key comes from a file given to {p.key_file_flag}, never from "
    return (Origin(field="key", value="a file", source="plan", why=why + "env or args"),)


def _stop_timeout(options: EmitOptions) -> tuple[int, Origin]:
    stop = math.ceil(options.stop_timeout)
    if stop < 1:
        raise EmitError(f"stop timeout {options.stop_timeout} is not a positive time")
    if options.stop_timeout != STOP_TIMEOUT:
        return stop, Origin(field="stop timeout", value=f"{stop}s", source="option")
    why = f"STOP_TIMEOUT, the launcher's own SIGTERM grace ({STOP_TIMEOUT:g} s)"
    return stop, Origin(field="stop timeout", value=f"{stop}s", source="default", why=why)


def _secret_origins(
    keyed: bool, target: Target, options: EmitOptions, names_: tuple[str, str]
) -> tuple[Origin, ...]:
    secret, key_file = names_
    if not keyed:
        return ()
    if target is not Target.SYSTEMD:
        names.subdomain(secret, "secret name")
        return (_chosen("secret", secret, options.secret, "NAME-api-key"),)
    why = "/etc/exedra/NAME.key, loaded as a credential"
    return (_chosen("key file", key_file, options.key_file, why),)


def _chosen(field: str, value: str, option: str, why: str) -> Origin:
    """A field an option sets, else a default whose reason is `why`."""
    if option:
        return Origin(field=field, value=value, source="option")
    return Origin(field=field, value=value, source="default", why=why)


READ_BACK: Final = "the plan's argv and env, read back as the executor reads them"
"""Why a plan field no layer is known to have set has its value."""


def layer_of(sources: Sequence[Source], flag: str, var: str) -> str:
    """The layer that set the plan field of `flag` or its variable `var` ("" unknown): by the
    flag's key and the variable's name as the merge recorded them, whatever spelling
    (``--port``, ``-p``, ``--port=N``) the layer wrote."""
    return next((s.layer for s in reversed(sources) if s.key and s.key in (flag, var)), "")


def _endpoint_origins(
    p: ExecutorProfile, plan: LaunchPlan, sources: Sequence[Source]
) -> tuple[Origin, ...]:
    ready = (
        f"plan.ready, the profile's {p.ready_path} under the plan's prefix: answers 200 only "
        "once the model is loaded (a models endpoint answers while loading)"
    )
    out = [Origin(field="ready path", value=plan.ready, source="plan", why=ready)]
    for field, value, flag, var in (
        ("port", str(plan.port), p.port_flag, p.port_env),
        ("host", plan.host, p.host_flag, p.host_env),
    ):
        layer = layer_of(sources, flag, var)
        why = "" if layer else READ_BACK
        out.append(Origin(field=field, value=value, source="plan", why=why, layer=layer))
    return tuple(out)


def _name(plan: LaunchPlan, options: EmitOptions) -> tuple[str, Origin]:
    if options.name:
        return options.name, Origin(field="name", value=options.name, source="option")
    base = plan.spec.id or _stem(plan.spec.path)
    name, changed = names.derived_name(base, f"exedra-{plan.spec.kind}")
    why = "the model id" if plan.spec.id else "the model file's name"
    if changed:
        why += (
            ", made an RFC 1035 label and ended with a hash of it (ids that normalise or cut "
            "alike stay apart)"
        )
    return name, Origin(field="name", value=name, source="default", why=why)


def _stem(path: str) -> str:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base[1:] else base


def key_vars(p: ExecutorProfile) -> frozenset[str]:
    """The variables that give the executor its key (the key variable, the key-file one)."""
    return _key_vars(p)


def _key_vars(p: ExecutorProfile) -> frozenset[str]:
    names = {p.key_env} if p.key_env else set()
    for flag in (p.key_flag, p.key_file_flag):
        f = p.flags.flags.get(flag)
        if f is not None:
            names.update(f.env)
    return frozenset(n for n in names if n)


def _without_keys(
    p: ExecutorProfile, plan: LaunchPlan, items: Sequence[Item]
) -> tuple[bool, tuple[str, ...]]:
    keyed = bool(plan.api_key)
    out: list[str] = []
    for it in items:
        if it.key is not None and it.key in p.key_flags:
            if it.key in p.secret_flags and it.key != p.key_flag:
                raise EmitError(
                    f"the plan passes {it.tokens[0]}, a secret the output would have to carry; "
                    "remove it from the plan"
                )
            keyed = True
            continue
        out.extend(it.tokens)
    return keyed or bool(_key_vars(p) & set(env_dict(plan.env))), tuple(out)


def plan_is_keyed(plan: LaunchPlan, p: ExecutorProfile) -> bool:
    """Whether the plan (for the executor of `p`) requires an API key (its own, or one a
    key flag or variable sets)."""
    if plan.api_key or _key_vars(p) & set(env_dict(plan.env)):
        return True
    try:
        items = p.flags.split_items(plan.args, "plan args")
    except EngineError:
        return False
    return any(it.key in p.key_flags for it in items if it.key is not None)


def _env_without_keys(p: ExecutorProfile, plan: LaunchPlan) -> tuple[tuple[str, str], ...]:
    keys = _key_vars(p)
    out = []
    for name, value in env_dict(plan.env).items():
        if name in keys:
            continue
        if is_secret_name(name) and value:
            raise EmitError(
                f"the plan's env sets {name}, a secret the output would have to carry; "
                "remove it from the plan and give it to the target yourself"
            )
        out.append((name, value))
    return tuple(out)


def _files(
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


def _mounts(
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


def _needs(
    p: ExecutorProfile, items: Sequence[Item], env: Sequence[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for it in items:
        need = p.resource_flags.get(it.key or "")
        if need is None or it.negated:
            continue
        if need == "priority" and not _raises_priority(it.values):
            continue
        found.setdefault(need, it.tokens[0])
    for name, value in env:
        f = p.flags.flag_for_env(name)
        need = p.resource_flags.get(f.key) if f is not None else None
        if need is not None and value.lower() not in ("", "0", "false", "off", "no"):
            found.setdefault(need, name)
    return tuple(sorted(found.items()))


def _memory(plan: LaunchPlan) -> tuple[MemoryLimits | None, Origin]:
    limits = memory_limits(plan)
    if limits is None:
        why = "the plan has no memory plan (made without the model)"
        return None, Origin(field="memory", value="none", source="plan", why=why)
    value = f"{limits.peak} MiB peak, limit {limits.limit} MiB"
    return limits, Origin(field="memory", value=value, source="plan", why=limits.why)


def _threads(p: ExecutorProfile, items: Sequence[Item]) -> int:
    for it in reversed(items):
        if it.key == p.threads_flag and it.values:
            try:
                return max(int(it.values[0]), 0)
            except ValueError:
                return 0
    return 0


def _raises_priority(values: Sequence[str]) -> bool:
    try:
        return int(values[0]) > 0 if values else False
    except ValueError:
        return True  # a value the executor will refuse: treat it as asking


def _runs_on_cpu(p: ExecutorProfile, items: Sequence[Item], env: Sequence[tuple[str, str]]) -> bool:
    if not p.cpu_only_args:
        return False
    wanted = p.flags.split_items(p.cpu_only_args, "profile")
    last = {it.key: it for it in items if it.key is not None}
    envmap = dict(env)
    for w in wanted:
        got = last.get(w.key or "")
        if got is not None:
            if (got.values, got.negated) != (w.values, w.negated):
                return False
            continue
        f = p.flags.flags.get(w.key or "")
        if f is None or not any(envmap.get(v) == "".join(w.values) for v in f.env):
            return False
    return True


def _gpu(
    p: ExecutorProfile,
    plan: LaunchPlan,
    *,
    items: Sequence[Item],
    env: Sequence[tuple[str, str]],
    hw: Hardware | None,
    options: EmitOptions,
) -> tuple[Gpu | None, tuple[Origin, ...]]:
    if _runs_on_cpu(p, items, env):
        why = f"the plan runs on the CPU ({' '.join(p.cpu_only_args)})"
        return None, (Origin(field="gpu", value="none", source="plan", why=why),)
    if options.gpu_resource:
        count = options.gpu_count or 1
        value = f"{count} x {options.gpu_resource}"
        return Gpu(driver="", backend="", count=count, resource=options.gpu_resource), (
            Origin(field="gpu", value=value, source="option"),
        )
    if hw is None:
        raise EmitError(
            "the plan runs on a GPU, but no hardware file says which: give the one it was "
            "planned with (--hardware), or --gpu-resource"
        )
    return _probed_gpu(p, plan, hw, options)


def _probed_gpu(
    p: ExecutorProfile, plan: LaunchPlan, hw: Hardware, options: EmitOptions
) -> tuple[Gpu, tuple[Origin, ...]]:
    exe = hw.executor(plan.spec.kind)
    backends = exe.backends if exe is not None else ()
    present = [g.driver for g in hw.gpus]
    pair = _pair(backends, present)
    if pair is None:
        raise EmitError(
            "the plan runs on a GPU, but the hardware file pairs no GPU backend of "
            f"{p.binary} ({', '.join(backends) or 'none'}) with a GPU driver it has "
            f"({', '.join(present) or 'none'}); plan with --no-gpu, or give --gpu-resource"
        )
    backend, driver, drivers = pair
    count = options.gpu_count or present.count(driver)
    resource = GPU_RESOURCES.get(driver, "")
    why = (
        f"the {backend} backend of {exe.path if exe else p.binary} drives "
        f"{'/'.join(drivers)}; the hardware file has {present.count(driver)} "
        f"{driver} GPU(s)" + (" (count by option)" if options.gpu_count else "")
    )
    origins = [Origin(field="gpu", value=f"{count} x {driver}", source="probe", why=why)]
    if resource:
        why = f"the device plugin's resource for the {driver} driver"
        origins.append(Origin(field="gpu resource", value=resource, source="default", why=why))
    return Gpu(driver=driver, backend=backend, count=count, resource=resource), tuple(origins)


def _pair(
    backends: Sequence[str], present: Sequence[str]
) -> tuple[str, str, tuple[str, ...]] | None:
    """The first GPU backend the executor has whose driver the host has."""
    for backend, drivers in BACKEND_DRIVERS:
        if backend in backends:
            for driver in drivers:
                if driver in present:
                    return backend, driver, drivers
    return None


def _check_container_host(p: ExecutorProfile, plan: LaunchPlan) -> None:
    h = plan.host
    if h == "localhost" or h.startswith("127.") or h in ("::1", "[::1]"):
        raise EmitError(
            f"the plan binds {h}, which nothing outside the container reaches (neither the "
            "probes nor the published port): plan with --host 0.0.0.0"
        )
    del p


def _image(
    p: ExecutorProfile, gpu: Gpu | None, options: EmitOptions
) -> tuple[str, str, tuple[Origin, ...]]:
    backend = gpu.backend if gpu else ""
    floats = "a tag floats: pin the build the plan was checked against with --image REF@sha256:..."
    if options.image:
        image = options.image
        why = "" if names.DIGEST.search(image) else floats
        imaged = Origin(field="image", value=image, source="option", why=why)
    else:
        image = p.images.get(backend, "")
        if not image:
            raise EmitError(
                f"no published {p.binary} image is known for the {backend or 'cpu'} backend: "
                "give --image"
            )
        why = f"the published {p.binary} image for the {backend or 'CPU'} backend; {floats}"
        imaged = Origin(field="image", value=image, source="default", why=why)
    command = options.image_command or p.image_command
    if not command:
        raise EmitError(f"the path of {p.binary} in the image is unknown: give --image-command")
    why = f"{p.binary}'s path in the published images"
    return image, command, (imaged, _chosen("command", command, options.image_command, why))


def _start_budget(files: Sequence[ModelFile], options: EmitOptions) -> tuple[int, Origin]:
    if options.start_budget:
        value = f"{options.start_budget}s"
        return options.start_budget, Origin(field="start budget", value=value, source="option")
    known = sum(f.size for f in files)
    unknown = [f.path for f in files if f.size <= 0]
    rate = f"{START_RATE // (1024 * 1024)} MiB/s"
    if unknown or not files:
        budget = START_UNKNOWN + (load_budget(known) - START_BASE if known else 0)
        why = (
            f"a file's size is unknown (planned without it: {', '.join(unknown) or 'no file'}): "
            f"{START_UNKNOWN} s + the known {known} bytes at {rate}"
        )
    else:
        budget = load_budget(known)
        why = (
            f"{START_BASE} s + model size / {rate} (a cold read from network storage) = "
            f"{START_BASE} + ceil({known} / {START_RATE}), counting {len(files)} file(s)"
        )
    return budget, Origin(field="start budget", value=f"{budget}s", source="default", why=why)


def read_back(
    kind: str, args: Sequence[str], env: Sequence[str], image_env: Sequence[str]
) -> tuple[str, int]:
    """Host and port as the executor reads emitted argv and env over its image's env."""
    merged = {**env_dict(image_env), **env_dict(env)}
    try:
        r = resolve(kind, args, merged)
    except EngineError as e:
        raise EmitError(f"the emitted argv and env do not resolve: {e}") from None
    return r.host, r.port
