"""What every target needs to know about a plan, derived once, with where each part came from.

A `Shape` is the plan as a deployment sees it: the argv and env without any key (the key
comes from a mounted file), the model files and the directory to mount, the GPU the plan
runs on and its resource name, the start and stop budgets. The targets (`k8s`, `systemd`,
`quadlet`) only lay it out. Pure and host-blind: every fact is the plan's, the hardware
file's, or an option's, and `Origin` records which.

Each part has its module (`options`, `keys`, `mounts`, `resources`, `ready`); this one puts
them together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

from exedra_engine._core.emit import names
from exedra_engine._core.emit.keys import (
    KEY_NAME,
    env_without_keys,
    key_origin,
    secret_origins,
    without_keys,
)
from exedra_engine._core.emit.limits import MemoryLimits, memory_limits
from exedra_engine._core.emit.mounts import Mount, loaded_files, mounts_for
from exedra_engine._core.emit.options import EmitOptions, Origin, check_options, chosen
from exedra_engine._core.emit.ready import check_plan, endpoint_origins
from exedra_engine._core.emit.resources import Gpu, gpu_of, needs_of, threads_of
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.launch.budget import START_BASE, START_RATE, START_UNKNOWN, load_budget
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.plan.provenance import Source
from exedra_engine._core.struct import Value
from exedra_engine._core.targets import Target
from exedra_engine._core.values import Hardware, ModelFile
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EmitError


class Shape(Value, frozen=True, kw_only=True):
    """A plan as a deployment sees it (see the module docstring)."""

    plan: LaunchPlan
    profile: ExecutorProfile
    name: str
    args: tuple[str, ...]
    """The plan's argv without key flags; model files not yet rewritten."""
    items: tuple[Item, ...] = ()
    """`args` as the flag table reads them (each `Item.at` is in the plan's argv)."""
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
    """Memory settings from the plan's memory (`exedra_engine._core.emit.limits`)."""
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
    check_plan(p, plan)
    name, named = _name(plan, options)
    reading = read_with(plan, p)
    items = reading.items
    keyed, kept = without_keys(p, plan, items)
    env = env_without_keys(p, plan)
    key = key_origin(p, keyed)
    files = loaded_files(plan, reading)
    mounts, mounted = mounts_for(files, options)
    gpu, gpu_origins = gpu_of(p, plan, items=items, env=env, hw=hardware, options=options)
    container = target is not Target.SYSTEMD
    if container:
        _check_container_host(p, plan)
    image, image_command, imaged = _image(p, gpu, options) if container else ("", "", ())
    start, started = _start_budget(files, options)
    stop, stopped = _stop_timeout(options)
    secret = options.secret or f"{name}-{KEY_NAME}"
    key_file = options.key_file or f"/etc/exedra/{name}.key"
    secrets = secret_origins(keyed, target, options, (secret, key_file))
    memory, remembered = _memory(plan)
    return Shape(
        plan=plan,
        profile=p,
        name=name,
        args=tuple(chain.from_iterable(it.tokens for it in kept)),
        items=kept,
        env=env,
        keyed=keyed,
        files=files,
        mounts=mounts,
        gpu=gpu,
        needs=needs_of(p, kept, env),
        memory=memory,
        threads=threads_of(p, items),
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
            *endpoint_origins(p, plan, sources),
            remembered,
        ),
    )


def _stop_timeout(options: EmitOptions) -> tuple[int, Origin]:
    stop = math.ceil(options.stop_timeout)
    if stop < 1:
        raise EmitError(f"stop timeout {options.stop_timeout} is not a positive time")
    if options.stop_timeout != STOP_TIMEOUT:
        return stop, Origin(field="stop timeout", value=f"{stop}s", source="option")
    why = f"STOP_TIMEOUT, the launcher's own SIGTERM grace ({STOP_TIMEOUT:g} s)"
    return stop, Origin(field="stop timeout", value=f"{stop}s", source="default", why=why)


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


def _memory(plan: LaunchPlan) -> tuple[MemoryLimits | None, Origin]:
    limits = memory_limits(plan)
    if limits is None:
        why = "the plan has no memory plan (made without the model)"
        return None, Origin(field="memory", value="none", source="plan", why=why)
    value = f"{limits.peak} MiB peak, limit {limits.limit} MiB"
    return limits, Origin(field="memory", value=value, source="plan", why=limits.why)


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
    return image, command, (imaged, chosen("command", command, options.image_command, why))


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
