"""What a container runs: the plan's argv and env with the model files at their mount and the
key as a mounted file, and the variables the container runtime reads. Shared by the targets
that run a container (`k8s`, `quadlet`)."""

from __future__ import annotations

from exedra_engine._core.emit.keys import KEY_DIR, KEY_NAME
from exedra_engine._core.emit.mounts import in_container
from exedra_engine._core.emit.shape import Shape
from exedra_engine._core.plan.load_files import normal_path


def container_argv(s: Shape) -> tuple[list[str], list[tuple[str, str]]]:
    """The container's args and env: the shape's, model files at their mount, the key file."""
    p = s.profile
    files = set(s.model_files)
    args: list[str] = []
    for it in s.items:
        if it.key in p.model_file_flags and it.values and normal_path(it.values[0]) in files:
            args.extend((it.tokens[0], in_container(it.values[0], s.mounts), *it.values[1:]))
        else:
            args.extend(it.tokens)
    env = []
    for name, value in s.env:
        f = p.flags.flag_for_env(name)
        moved = f is not None and f.key in p.model_file_flags and value
        env.append((name, in_container(value, s.mounts) if moved else value))
    env += container_env(s)
    if s.keyed:
        args += [p.key_file_flag, key_path(s)]
    return args, env


VULKAN_CAPABILITIES = "compute,utility,graphics"
"""NVIDIA's container toolkit mounts the Vulkan driver only with the graphics capability;
its default is compute and utility."""


def container_env(s: Shape) -> list[tuple[str, str]]:
    """Variables the container runtime reads (not the executor)."""
    vulkan = s.gpu is not None and s.gpu.driver == "nvidia" and s.gpu.backend == "vulkan"
    if vulkan and not any(n == "NVIDIA_DRIVER_CAPABILITIES" for n, _ in s.env):
        return [("NVIDIA_DRIVER_CAPABILITIES", VULKAN_CAPABILITIES)]
    return []


def key_path(s: Shape) -> str:
    return f"{KEY_DIR}/{KEY_NAME}"
