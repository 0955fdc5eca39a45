"""A group plan emitted for the engines that run fleets: every member's files as the
per-plan emitter makes them (`emit_files`), then given the member's share, plus what ties
the members together. Pure and host-blind, like `emit`.

- **systemd**: one ``.service`` per member, and ``NAME.target`` that wants them all; each
  member is ``PartOf=`` the target, so starting, stopping or restarting the target does it
  to every member together. Each member's ``CPUAffinity=`` is its CPU set, ``MemoryMax=``
  its memory share and ``MemoryHigh=`` halfway between its planned peak and its share (the
  single-plan rule, peak + half the margin, with the share as the limit).
- **Quadlet**: one ``.container`` per member plus the same ``.target``, not a ``.pod``: a
  pod needs Podman 5.0 (Debian 12 ships 4.3, RHEL 9 4.9), and it puts every member in one
  network namespace whose ports are published by the pod unit, so each member's own unit
  could no longer be the one the single emitter makes and checks. Each member gets
  ``Memory=`` from its share and ``PodmanArgs=--cpuset-cpus=`` from its CPU set.
- **Kubernetes**: a Deployment and a Service per member, not one Pod: a Pod is scheduled,
  restarted and resized as one, so one member's crash loop or upgrade would restart the
  others, and one Pod must fit one node whole. The memory request is the member's planned
  peak (the single emitter's, else the resident peak the group planner estimated; the share
  only when neither is known), the memory limit its share, or the single plan's limit when
  that is higher (never below the planned peak plus margin); the CPU request and limit are
  its threads, and this host's CPU ids are dropped from its argv (`cluster`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from exedra_engine._core.emit import Emitted, emit_files
from exedra_engine._core.emit.checks import check_files
from exedra_engine._core.emit.formats.ini import Section, plain, read_ini, write_ini
from exedra_engine._core.emit.group.cluster import deployed_plan, memory_request, share_cpus
from exedra_engine._core.emit.names import derived_name
from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.targets import Target
from exedra_engine._core.values import Hardware
from exedra_engine.errors import EmitError, EmitRefused

DEFAULT_NAME = "exedra-group"


def member_name(group: str, member: str) -> str:
    """The unit or object name of one member: the group's name and the member's id."""
    return derived_name(f"{group}-{member}", "member")[0]


def emit_group_files(
    group: GroupPlan,
    target: Target,
    options: EmitOptions = EmitOptions(),
    hardware: Hardware | None = None,
    *,
    executors: Executors = BUILTIN,
) -> Emitted:
    """The files that run every member of `group` on `target`, tied together as the module
    says; raises `EmitError` as `emit` does, naming the member."""
    name = options.name or DEFAULT_NAME
    names = member_names(group, name)
    files: dict[str, str] = {}
    origins: list[Origin] = []
    services: list[str] = []
    for share, planned in group.members:
        plan = deployed_plan(planned, target, executors)
        own = _member_options(options, names[share.id])
        try:
            e = emit_files(plan, target, own, hardware, executors=executors)
        except EmitRefused as refused:
            raise EmitRefused(tuple(f"member {share.id}: {p}" for p in refused.problems)) from None
        except EmitError as err:
            raise EmitError(f"member {share.id}: {err}") from None
        for fname, text in e.files.items():
            files[fname] = _given_share(target, text, plan, share, name, origins=origins)
        origins += [_member_origin(share.id, o) for o in e.origins]
        services.append(f"{own.name}.service")
        problems = check_files(plan, target, {k: files[k] for k in e.files}, executors=executors)
        if problems:
            raise EmitRefused(tuple(f"member {share.id}: {p}" for p in problems))
    if target in (Target.SYSTEMD, Target.QUADLET):
        files[f"{name}.target"] = _target(name, group, services)
    return Emitted(files=dict(sorted(files.items())), origins=tuple(origins))


def member_names(group: GroupPlan, name: str) -> dict[str, str]:
    """Each member's unit or object name (`member_name`) by id; `EmitError` naming both
    members where two ids derive one name (``A`` and ``a-c917e1``), which would write one
    member's files over the other's."""
    out: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for member in group.ids:
        derived = member_name(name, member)
        if derived in by_name:
            raise EmitError(
                f"members {by_name[derived]!r} and {member!r} would both be named {derived!r}: "
                "give one of them another id"
            )
        by_name[derived], out[member] = member, derived
    return out


def _member_options(options: EmitOptions, name: str) -> EmitOptions:
    """The group's options for one member: its own name (the secret, claim and key file it
    derives from it, unless the caller named one for every member)."""
    return msgspec.structs.replace(options, name=name)


def _member_origin(member: str, o: Origin) -> Origin:
    return msgspec.structs.replace(o, field=f"{member}.{o.field}")


def _given_share(
    target: Target,
    text: str,
    plan: LaunchPlan,
    share: MemberShare,
    group: str,
    *,
    origins: list[Origin],
) -> str:
    if target is Target.K8S:
        return _k8s_share(text, plan, share, origins)
    memory = _memory(plan, share)
    tie = [("PartOf", f"{group}.target")]
    if target is Target.SYSTEMD:
        service: list[tuple[str, str]] = []
        if share.cpus:
            service.append(("CPUAffinity", cpu_list(share.cpus, " ")))
        if memory:
            service += [("MemoryHigh", f"{memory[0]}M"), ("MemoryMax", f"{memory[1]}M")]
        edits = {"Unit": tie, "Service": service, "Install": [("WantedBy", f"{group}.target")]}
    else:
        container: list[tuple[str, str]] = []
        if share.cpus:
            container.append(("PodmanArgs", f"--cpuset-cpus={cpu_list(share.cpus, ',')}"))
        if memory:
            container.append(("Memory", f"{memory[1]}m"))
        edits = {"Unit": tie, "Container": container, "Install": [("WantedBy", f"{group}.target")]}
    for section, settings in edits.items():
        for key, value in settings:
            origins.append(
                Origin(
                    field=f"{share.id}.{section}.{key}",
                    value=value,
                    source="plan",
                    why="the member's share of the group plan"
                    if section in ("Service", "Container")
                    else f"started and stopped with {group}.target",
                )
            )
    return _edit_ini(text, edits)


def _memory(plan: LaunchPlan, share: MemberShare) -> tuple[int, int] | None:
    """(high, max) MiB from the member's share: max is the share, high halfway between the
    planned peak and the share. None without a share."""
    if not share.memory:
        return None
    peak = plan.memory.host.total if plan.memory is not None else share.memory
    peak = min(peak, share.memory)
    high = math.ceil((peak + (share.memory - peak) // 2) / MIB)
    return high, math.ceil(share.memory / MIB)


def cpu_list(cpus: Sequence[int], sep: str) -> str:
    """CPU ids as ranges (``0-3 6``), the form systemd's CPUAffinity= and podman's
    --cpuset-cpus read (with their separators)."""
    out: list[str] = []
    ids = sorted(set(cpus))
    start = prev = ids[0]
    for c in [*ids[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return sep.join(out)


def _edit_ini(text: str, edits: dict[str, list[tuple[str, str]]]) -> str:
    """`text` with each section's settings in `edits` replacing those of the same key (or
    added at the section's end); the header comment kept."""
    header = []
    for line in text.splitlines():
        if not line.startswith("# "):
            break
        header.append(line[2:])
    sections = read_ini(text)
    out: list[Section] = []
    for name, settings in sections.items():
        new = edits.get(name, [])
        keys = {k for k, _ in new}
        kept = [(k, v) for k, v in settings if k not in keys]
        out.append((name, [*kept, *new]))
    return write_ini(out, header)


def _target(name: str, group: GroupPlan, services: list[str]) -> str:
    unit = [
        ("Description", plain(f"exedra-engine group {name}: {', '.join(group.ids)}")),
        ("Wants", " ".join(services)),
    ]
    header = [
        f"{name}: emitted by exedra-engine from a group plan; edit the plan, not this file.",
        f"systemctl start {name}.target starts every member; stop stops them together.",
    ]
    return write_ini([("Unit", unit), ("Install", [("WantedBy", "multi-user.target")])], header)


def _k8s_share(text: str, plan: LaunchPlan, share: MemberShare, origins: list[Origin]) -> str:
    import yaml

    from exedra_engine._core.emit.formats.k8s import dump_yaml

    header = [line for line in text.splitlines() if line.startswith("#")]
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(text))
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            res = c.setdefault("resources", {})
            req, lim = res.setdefault("requests", {}), res.setdefault("limits", {})
            if share.memory:
                # The scheduler reserves what the member's plan needs (its peak, the single
                # emitter's request); the share is how far it may grow (the limit).
                mib = math.ceil(share.memory / MIB)
                req.setdefault("memory", f"{math.ceil(memory_request(plan, share) / MIB)}Mi")
                lim["memory"] = f"{max(mib, _mi(lim.get('memory')))}Mi"
            if cpus := share_cpus(share):
                req["cpu"] = lim["cpu"] = str(cpus)
            for kind, values in (("requests", req), ("limits", lim)):
                origins += [
                    Origin(
                        field=f"{share.id}.container.resources.{kind}.{k}",
                        value=str(v),
                        source="plan",
                        why="the member's share of the group plan (memory, threads)",
                    )
                    for k, v in values.items()
                    if k in ("memory", "cpu")
                ]
    return "\n".join(header) + "\n" + dump_yaml(docs)


def _mi(value: object) -> int:
    """Mebibytes of a ``NMi`` quantity the single emitter wrote (0 if none)."""
    if isinstance(value, str) and value.endswith("Mi"):
        return int(value[:-2])
    return 0
