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

from exedra_engine._core.endpoint import env_dict, resolve
from exedra_engine._core.executors import ExecutorProfile, executor_profile
from exedra_engine._core.flags import Item
from exedra_engine._core.layers import Source
from exedra_engine._core.redact import is_secret_name
from exedra_engine._core.struct import Value
from exedra_engine._core.targets import Storage, Target
from exedra_engine._core.values import Hardware, LaunchPlan
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EmitError, EngineError


class EmitOptions(Value, frozen=True, kw_only=True, omit_defaults=True):
    """The choices a plan does not make. Zero values are derived (see `Origin` for how)."""

    name: str = ""
    """Object, unit and file name; "" = the model id, else the model file's stem."""
    image: str = ""
    """Container image; "" = the executor's published image for the plan's backend."""
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
    """The host directory that holds every model file; "" = their deepest common directory."""
    namespace: str = ""
    uid: int = 65532
    """Kubernetes: the numeric user (and group) the pod runs as."""
    stop_timeout: float = STOP_TIMEOUT
    """Seconds the executor gets after SIGTERM before it is killed."""
    start_budget: int = 0
    """Seconds a start may take before it counts as failed; 0 = sized from the model."""
    gpu_resource: str = ""
    """Kubernetes: the GPU's extended resource; "" = by the probed driver."""
    gpu_count: int = 0
    """GPUs to ask for; 0 = every GPU of the chosen driver in the hardware file."""
    waiter: str = "/usr/bin/exedra-engine"
    """systemd: the exedra-engine whose ``wait-ready`` the unit's ExecStartPost runs."""
    publish_address: str = "127.0.0.1"
    """Quadlet: the host address the port is published on ("" = every address)."""


class Origin(Value, frozen=True, kw_only=True):
    """Where one emitted field came from."""

    field: str
    value: str
    source: str
    """``plan`` (with its layer when known), ``probe``, ``option`` or ``default``."""
    why: str = ""


class Gpu(Value, frozen=True, kw_only=True):
    driver: str
    backend: str
    count: int
    resource: str
    """The Kubernetes extended resource ("" when none is known for the driver)."""


class Shape(Value, frozen=True, kw_only=True):
    """A plan as a deployment sees it (see the module docstring)."""

    plan: LaunchPlan
    profile_kind: str
    name: str
    args: tuple[str, ...]
    """The plan's argv without key flags; model files not yet rewritten."""
    env: tuple[tuple[str, str], ...]
    """The plan's env without key variables."""
    keyed: bool
    model_files: tuple[str, ...]
    models_dir: str
    gpu: Gpu | None
    start_budget: int
    stop_timeout: int
    image: str
    image_command: str
    secret: str
    key_file: str
    origins: tuple[Origin, ...]


MOUNT = "/models"
"""Where containers see the model directory."""
KEY_DIR = "/run/secrets/exedra"
"""Where containers see the key (a directory: a Secret volume mounts one)."""
KEY_NAME = "api-key"
"""The key's file name: the Secret's key, the credential's name."""

# The extended resource a device plugin advertises for each kernel driver (NVIDIA's and AMD's
# plugins, Intel's GPU plugin: one resource per driver). Other drivers have none known.
GPU_RESOURCES = {
    "nvidia": "nvidia.com/gpu",
    "amdgpu": "amd.com/gpu",
    "i915": "gpu.intel.com/i915",
    "xe": "gpu.intel.com/xe",
}
# The drivers each GGML GPU backend drives, most specific backend first; vulkan drives any.
BACKEND_DRIVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda", ("nvidia",)),
    ("hip", ("amdgpu",)),
    ("sycl", ("xe", "i915")),
    ("musa", ("mtgpu",)),
    ("vulkan", ("nvidia", "amdgpu", "xe", "i915")),
)

START_BASE = 60
"""Seconds of a start that do not depend on the model: process start, device init, warm-up."""
START_RATE = 50 * 1024 * 1024
"""Bytes per second the model is read at, cold, from network storage (a slow PVC)."""
START_UNKNOWN = 900
"""The budget when the plan has no model header (planned without the file): 15 minutes."""

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def shape(
    plan: LaunchPlan,
    target: Target,
    options: EmitOptions,
    hardware: Hardware | None,
    sources: Sequence[Source] = (),
) -> Shape:
    """Derive the `Shape`, raising `EmitError` for what cannot be emitted as asked."""
    p = executor_profile(plan.spec.kind)
    o = _Origins(sources)
    name = _name(plan, options, o)
    items = p.flags.split_items(plan.args, "plan args")
    keyed, args = _without_keys(p, plan, items)
    env = _env_without_keys(p, plan)
    if keyed and not p.key_file_flag:
        raise EmitError(f"{p.binary} reads no key file: a keyed plan cannot be emitted without it")
    if keyed:
        o.add(
            "key",
            "a file",
            "plan",
            f"the plan is keyed; the key comes from a file given to "
            f"{p.key_file_flag}, never from env or args",
        )
    files = _model_files(p, p.flags.split_items(args, "plan args"), env)
    for f in files:
        if not f.startswith("/"):
            raise EmitError(f"model file {f!r} is a relative path: plan with an absolute one")
    models_dir = _models_dir(files, options, o)
    gpu = _gpu(p, plan, items=items, env=env, hw=hardware, options=options, o=o)
    container = target is not Target.SYSTEMD
    if container:
        _check_container_host(p, plan)
    image, image_command = _image(p, gpu, options, o) if container else ("", "")
    start = _start_budget(plan, options, o)
    stop = math.ceil(options.stop_timeout)
    if stop < 1:
        raise EmitError(f"stop timeout {options.stop_timeout} is not a positive time")
    o.add(
        "stop timeout",
        f"{stop}s",
        "option" if options.stop_timeout != STOP_TIMEOUT else "default",
        ""
        if options.stop_timeout != STOP_TIMEOUT
        else f"STOP_TIMEOUT, the launcher's own SIGTERM grace ({STOP_TIMEOUT:g} s)",
    )
    secret = options.secret or f"{name}-{KEY_NAME}"
    if keyed and target is not Target.SYSTEMD:
        _label(secret, "secret name")
        o.add(
            "secret",
            secret,
            "option" if options.secret else "default",
            "" if options.secret else "NAME-api-key",
        )
    key_file = options.key_file or f"/etc/exedra/{name}.key"
    if keyed and target is Target.SYSTEMD:
        o.add(
            "key file",
            key_file,
            "option" if options.key_file else "default",
            "" if options.key_file else "/etc/exedra/NAME.key, loaded as a credential",
        )
    o.add(
        "ready path",
        plan.ready,
        "plan",
        "plan.ready: answers 200 only once the model is "
        "loaded (a models endpoint answers while loading)",
    )
    o.add("port", str(plan.port), "plan", o.layer_of(p.port_flag, p.port_env))
    o.add("host", plan.host, "plan", o.layer_of(p.host_flag, p.host_env))
    return Shape(
        plan=plan,
        profile_kind=p.kind,
        name=name,
        args=args,
        env=env,
        keyed=keyed,
        model_files=files,
        models_dir=models_dir,
        gpu=gpu,
        start_budget=start,
        stop_timeout=stop,
        image=image,
        image_command=image_command,
        secret=secret,
        key_file=key_file,
        origins=tuple(o.items),
    )


class _Origins:
    def __init__(self, sources: Sequence[Source]) -> None:
        self.items: list[Origin] = []
        self.sources = sources

    def add(self, field: str, value: str, source: str, why: str = "") -> None:
        self.items.append(Origin(field=field, value=value, source=source, why=why))

    def layer_of(self, flag: str, var: str) -> str:
        for s in reversed(self.sources):
            head = s.text.split(" ", 1)[0]
            if (s.what == "arg" and head == flag) or (var and s.text.startswith(var + "=")):
                return f"set by the {s.layer} layer"
        return "the plan's argv and env, read back as the executor reads them"


def _label(value: str, what: str) -> str:
    if len(value) > 63 or not _LABEL.fullmatch(value):
        raise EmitError(
            f"{what} {value!r} is not a DNS label (lower-case letters, digits and '-', at most "
            "63, starting and ending with a letter or digit)"
        )
    return value


def _name(plan: LaunchPlan, options: EmitOptions, o: _Origins) -> str:
    if options.name:
        o.add("name", options.name, "option")
        return _label(options.name, "name")
    base = plan.spec.id or _stem(plan.spec.path)
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:48].strip("-")
    if not name:
        name = f"exedra-{plan.spec.kind.value}"
    why = "the model id" if plan.spec.id else "the model file's name"
    o.add("name", name, "default", f"{why}, made a DNS label")
    return name


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


def plan_is_keyed(plan: LaunchPlan) -> bool:
    """Whether the plan requires an API key (its own, or one a key flag or variable sets)."""
    p = executor_profile(plan.spec.kind)
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


def _model_files(
    p: ExecutorProfile, items: Sequence[Item], env: Sequence[tuple[str, str]]
) -> tuple[str, ...]:
    found: list[str] = []
    for it in items:
        if it.key in p.model_file_flags and it.values:
            found.append(it.values[0])
    for name, value in env:
        f = p.flags.flag_for_env(name)
        if f is not None and f.key in p.model_file_flags and value:
            found.append(value)
    return tuple(dict.fromkeys(normal_path(f) for f in found))


def normal_path(path: str) -> str:
    """`path` with ``.``, ``..`` and repeated slashes resolved lexically."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part != ".." or not absolute:
            parts.append(part)
    return ("/" if absolute else "") + "/".join(parts)


def _models_dir(files: Sequence[str], options: EmitOptions, o: _Origins) -> str:
    if options.models_dir:
        d = normal_path(options.models_dir)
        for f in files:
            if not f.startswith(d.rstrip("/") + "/"):
                raise EmitError(f"model file {f} is not under --models-dir {d}")
        o.add("models dir", d, "option")
        return d
    dirs = [f.rsplit("/", 1)[0].split("/") for f in files]
    if not dirs:
        return "/"
    common = dirs[0]
    for parts in dirs[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    found = "/".join(common) or "/"
    o.add("models dir", found, "plan", "the deepest directory holding every model file of the argv")
    return found


def in_container(path: str, models_dir: str) -> str:
    """Where a container sees the model file `path`."""
    rel = normal_path(path)[len(models_dir.rstrip("/")) :]
    return MOUNT + rel


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
    o: _Origins,
) -> Gpu | None:
    if _runs_on_cpu(p, items, env):
        o.add("gpu", "none", "plan", f"the plan runs on the CPU ({' '.join(p.cpu_only_args)})")
        return None
    if options.gpu_resource:
        count = options.gpu_count or 1
        o.add("gpu", f"{count} x {options.gpu_resource}", "option")
        return Gpu(driver="", backend="", count=count, resource=options.gpu_resource)
    if hw is None:
        raise EmitError(
            "the plan runs on a GPU, but no hardware file says which: give the one it was "
            "planned with (--hardware), or --gpu-resource"
        )
    exe = hw.executor(plan.spec.kind)
    backends = exe.backends if exe is not None else ()
    present = [g.driver for g in hw.gpus]
    for backend, drivers in BACKEND_DRIVERS:
        if backend not in backends:
            continue
        for driver in drivers:
            if driver in present:
                count = options.gpu_count or present.count(driver)
                resource = GPU_RESOURCES.get(driver, "")
                o.add(
                    "gpu",
                    f"{count} x {driver}",
                    "probe",
                    f"the {backend} backend of {exe.path if exe else p.binary} drives "
                    f"{'/'.join(drivers)}; the hardware file has {present.count(driver)} "
                    f"{driver} GPU(s)" + (" (count by option)" if options.gpu_count else ""),
                )
                if resource:
                    o.add(
                        "gpu resource",
                        resource,
                        "default",
                        f"the device plugin's resource for the {driver} driver",
                    )
                return Gpu(driver=driver, backend=backend, count=count, resource=resource)
    raise EmitError(
        "the plan runs on a GPU, but the hardware file pairs no GPU backend of "
        f"{p.binary} ({', '.join(backends) or 'none'}) with a GPU driver it has "
        f"({', '.join(present) or 'none'}); plan with --no-gpu, or give --gpu-resource"
    )


def _check_container_host(p: ExecutorProfile, plan: LaunchPlan) -> None:
    h = plan.host
    if h == "localhost" or h.startswith("127.") or h in ("::1", "[::1]"):
        raise EmitError(
            f"the plan binds {h}, which nothing outside the container reaches (neither the "
            "probes nor the published port): plan with --host 0.0.0.0"
        )
    del p


def _image(
    p: ExecutorProfile, gpu: Gpu | None, options: EmitOptions, o: _Origins
) -> tuple[str, str]:
    backend = gpu.backend if gpu else ""
    if options.image:
        image = options.image
        o.add("image", image, "option")
    else:
        image = p.images.get(backend, "")
        if not image:
            raise EmitError(
                f"no published {p.binary} image is known for the {backend or 'cpu'} backend: "
                "give --image"
            )
        o.add(
            "image",
            image,
            "default",
            f"the published {p.binary} image for the {backend or 'CPU'} backend",
        )
    command = options.image_command or p.image_command
    if not command:
        raise EmitError(f"the path of {p.binary} in the image is unknown: give --image-command")
    o.add(
        "command",
        command,
        "option" if options.image_command else "default",
        "" if options.image_command else f"{p.binary}'s path in the published images",
    )
    return image, command


def _start_budget(plan: LaunchPlan, options: EmitOptions, o: _Origins) -> int:
    if options.start_budget:
        if options.start_budget < 1:
            raise EmitError(f"start budget {options.start_budget} is not a positive time")
        o.add("start budget", f"{options.start_budget}s", "option")
        return options.start_budget
    if plan.model is None or plan.model.size <= 0:
        o.add(
            "start budget",
            f"{START_UNKNOWN}s",
            "default",
            "the plan has no model header (planned without the file), so its size is unknown",
        )
        return START_UNKNOWN
    size = plan.model.size
    budget = START_BASE + math.ceil(size / START_RATE)
    o.add(
        "start budget",
        f"{budget}s",
        "default",
        f"{START_BASE} s + model size / {START_RATE // (1024 * 1024)} MiB/s (a cold read from "
        f"network storage) = {START_BASE} + ceil({size} / {START_RATE})",
    )
    return budget


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
