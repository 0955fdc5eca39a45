"""Where the executor's view of the devices (``--list-devices``) and the kernel's (DRM render
nodes, the nvidia driver's cards: `Hardware.gpus`) disagree, said for people. Pure.

The two are not matched by identity (a backend numbers devices its own way and names no PCI
address); what can be told for certain is told: a device the executor sees that the kernel
shows no GPU for (WSL2's ``/dev/dxg``, a container without sysfs, a software renderer), a
GPU the executor does not see (hidden by a ``*_VISIBLE_DEVICES`` variable, or a driver its
backend lacks), a memory size only one side knows.
"""

from __future__ import annotations

from exedra_engine._core.host.devices import Device, offloads
from exedra_engine._core.host.machine import GPU, Hardware

_SOFTWARE = ("llvmpipe", "lavapipe", "swiftshader")
"""Descriptions of software renderers: a "device" that is the CPU, in host memory."""


def disagreements(hw: Hardware, kind: str, binary: str) -> tuple[str, ...]:
    """What `binary` (the `kind` executor) sees that the kernel does not, and the reverse;
    () when its devices were not listed or the views agree."""
    exe = hw.executor(kind)
    if exe is None or not exe.listed():
        return ()
    usable = [d for d in exe.devices if offloads(d)]
    gpus = hw.gpus
    said: list[str] = []
    if not usable and gpus:
        shown = ", ".join(f"{g.card} ({g.driver or 'unknown driver'})" for g in gpus)
        said.append(
            f"the kernel shows {shown}, but {binary} lists no device it can use (its "
            "backends do not drive it, or a *_VISIBLE_DEVICES variable hides it): plans run "
            "on the CPU"
        )
        return tuple(said)
    for i, d in enumerate(usable):
        said.extend(_device_said(d, gpus[i] if i < len(gpus) else None, binary))
    if len(gpus) > len(usable):
        said.append(
            f"the kernel shows {len(gpus)} GPU(s), {binary} lists {len(usable)}: the others "
            "are hidden from it (a *_VISIBLE_DEVICES variable) or not driven by its backends"
        )
    return tuple(said)


def _device_said(d: Device, gpu: GPU | None, binary: str) -> list[str]:
    """What is worth saying of one listed device beside the kernel's GPU of its rank."""
    said: list[str] = []
    if gpu is None:
        said.append(
            f"{d.name} ({d.description}) has no GPU in sysfs (no DRM render node, no "
            f"nvidia driver entry): {binary} sees it, the kernel's view does not "
            "(WSL2, a container without sysfs, a software renderer); plans use it"
        )
    elif not gpu.vram and d.total:
        said.append(
            f"{gpu.card} ({gpu.driver or 'unknown driver'}): VRAM unknown in "
            f"sysfs; {binary} lists {d.name} with {d.total >> 20} MiB, "
            f"{d.free >> 20} MiB free: plans use its figures"
        )
    if any(s in d.description.lower() for s in _SOFTWARE):
        said.append(
            f"{d.name} is a software renderer ({d.description}): it runs on the CPU, "
            "its memory is host memory"
        )
    return said
