"""Emit a plan for the engines that already run fleets: Kubernetes, systemd, Podman Quadlet.

`emit(plan, target, options, hardware=...)` is pure and host-blind: it reads nothing from the
machine it runs on, and equal inputs give byte-identical files. The output is built as data
(dicts, INI sections) and serialized (YAML, systemd's INI with its escaping), so no value can
break the file or inject into it. `Emitted.origins` says where each field that one could
wonder about came from: the plan (and its layer), the hardware file, an option, or a default
and its reason.

`check(plan, target, files)` re-reads emitted (or edited) files and lists what is wrong with
them: the semantic checks a schema cannot make (`exedra_engine._core.emit.checks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.emit.shape import Shape, shape
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.outcome import boundary
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.provenance import Source
from exedra_engine._core.struct import Value, frozen_fields
from exedra_engine._core.targets import Selinux, Storage, Target
from exedra_engine._core.values import Hardware
from exedra_engine.errors import EmitRefused

__all__ = (
    "EmitOptions",
    "Emitted",
    "Origin",
    "Selinux",
    "Storage",
    "Target",
    "emit",
    "emit_files",
)


class Emitted(Value, frozen=True, kw_only=True):
    """The files for one target, by file name, and where their fields came from."""

    files: dict[str, str]
    origins: tuple[Origin, ...]

    def __post_init__(self) -> None:
        frozen_fields(self, "files")


def emit_files(
    plan: LaunchPlan,
    target: Target,
    options: EmitOptions = EmitOptions(),
    hardware: Hardware | None = None,
    sources: Sequence[Source] = (),
    *,
    executors: Executors = BUILTIN,
) -> Emitted:
    """The files that run `plan` on `target`. `hardware` is the hardware file the plan was
    made for (its GPU driver names the GPU resource); `sources` are the plan's provenance
    (`explain_launch`), for `Emitted.origins`. Fails with `EmitError` for a plan that cannot
    be emitted as asked (a loopback bind in a container, a secret in the plan's env).
    `executors` are those the plan's kind is looked up in (the ones it was planned with)."""
    # The targets are loaded when used: the command line parses its options without them
    # (and without PyYAML, which only the Kubernetes target needs).
    from exedra_engine._core.emit.checks import check_files
    from exedra_engine._core.emit.formats.k8s import emit_k8s
    from exedra_engine._core.emit.formats.quadlet import emit_quadlet
    from exedra_engine._core.emit.formats.systemd import emit_systemd

    s: Shape = shape(plan, target, options, hardware, sources, executors=executors)
    render = {Target.K8S: emit_k8s, Target.SYSTEMD: emit_systemd, Target.QUADLET: emit_quadlet}
    files, extra = render[target](s, options)
    # What --check would reject is never handed out: the same checks gate the emission.
    problems = check_files(plan, target, files, executors=executors)
    if problems:
        raise EmitRefused(tuple(problems))
    return Emitted(files=dict(sorted(files.items())), origins=(*s.origins, *extra))


emit = boundary(emit_files)
"""`emit_files` as a Result: ``Success(Emitted)``, or ``Failure`` with its `EngineError`."""


def targets() -> Mapping[str, Target]:
    """Target names as the command line spells them."""
    return {t.value: t for t in Target}
