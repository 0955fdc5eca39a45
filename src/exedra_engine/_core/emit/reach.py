"""Whether a systemd unit's user can reach what the unit names: its executor (``ExecStart=``),
its readiness waiter (``ExecStartPost=``) and its model files. Pure: the host's facts (the
mode of each directory on each path) are gathered by the shell (`_shell/local/path_modes.py`) and
passed in as `PathFacts`.

The emitted unit runs as ``DynamicUser=``: a fresh user that owns nothing and is in no group
but the unit's supplementary ones. It enters a directory only through its "others" execute
bit, runs a binary through its others' execute bit, reads a model through its others' read
bit. ``PrivateTmp=`` (which ``DynamicUser=`` implies) gives it an empty ``/tmp`` and
``/var/tmp``; ``ProtectHome=yes`` hides ``/home``, ``/root`` and ``/run/user``. A unit built
from a clone's install (the executor in ``~/.cache``, the waiter in a venv in the clone)
passes every other check and cannot start: these problems say so, and how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal

from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.formats.readback import env_words, words
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.load_files import unit_files
from exedra_engine._core.struct import Value, freeze

Role = Literal["executor", "waiter", "model"]

INSTALL_DIR: Final = "/usr/local/lib/exedra-engine"
"""Where docs/how-to/systemd.md installs the executor and the waiter for units to reach."""
_TMP: Final = ("/tmp/", "/var/tmp/")
_HOMES: Final = ("/home/", "/root/", "/run/user/")
# The mode bits judged (the `stat` module's values; the pure core imports no `stat`).
_IFMT: Final = 0o170000
_IFDIR: Final = 0o040000
_IXOTH: Final = 0o001
_IROTH: Final = 0o004


class PathStep(Value, frozen=True, kw_only=True):
    """One directory on the way to a path, or the file itself, as the host has it."""

    path: str
    mode: int
    """``st_mode``, the file type bits included."""


class PathFacts(Value, frozen=True, kw_only=True):
    """What the host says of one path a unit names."""

    role: Role
    path: str
    steps: tuple[PathStep, ...] = ()
    """Every directory from ``/`` down and the file itself, for the path as written and for
    its target when links lead elsewhere; empty when the path does not exist here (nothing
    is judged then: the unit may be meant for another host)."""
    real: str = ""
    """The path with its links resolved ("" when it does not exist here)."""


def unit_paths(text: str, profile: ExecutorProfile) -> list[tuple[Role, str]]:
    """The paths a systemd unit's user must reach: ``ExecStart=``'s program, each
    ``ExecStartPost=``'s, and the model files the executor's argv and env name."""
    s = ini.read_ini(text)
    out: list[tuple[Role, str]] = []
    try:
        env = [w for e in ini.setting(s, "Service", "Environment") for w in env_words(e)]
    except ValueError:
        env = []
    lines: tuple[tuple[str, Role], ...] = (("ExecStart", "executor"), ("ExecStartPost", "waiter"))
    for key, role in lines:
        for line in ini.setting(s, "Service", key):
            try:
                argv = words(line, {"d": "/run/credentials/UNIT", "n": "UNIT"})
            except ValueError:
                continue  # the unit's own checks say so
            if argv:
                out.append((role, argv[0].lstrip("-@:+!")))  # systemd's prefixes
                if role == "executor":
                    out += [("model", f) for f, _ in unit_files(profile, argv[1:], env)]
    return out


def reach_problems(text: str, facts: Sequence[PathFacts]) -> list[str]:
    """What the systemd unit `text` names that its user cannot reach, each with its fix."""
    s = ini.read_ini(text)
    dynamic = ini.setting(s, "Service", "DynamicUser")[-1:] == ["yes"]
    private_tmp = dynamic or ini.setting(s, "Service", "PrivateTmp")[-1:] == ["yes"]
    hidden_home = ini.setting(s, "Service", "ProtectHome")[-1:] in (["yes"], ["tmpfs"])
    out = []
    for f in facts:
        why = _why(f, dynamic=dynamic, private_tmp=private_tmp, hidden_home=hidden_home)
        if why:
            out.append(f"{_WHAT[f.role]} {f.path}: {why}; {_FIX[f.role]}")
    return out


def container_reach_problems(facts: Sequence[PathFacts], user: str) -> list[str]:
    """What a container that runs as `user` (Quadlet's ``User=``, not root, owning nothing
    on the host: under a rootless Podman it is a sub-uid) cannot read of the model files
    mounted into it: each directory on the way needs its others' execute bit, each file
    its others' read bit."""
    out = []
    for f in facts:
        why = _closed(f, f"User={user}") if f.steps else ""
        if why:
            out.append(f"{_WHAT[f.role]} {f.path}: {why}; {_FIX[f.role]}")
    return out


_WHAT: Final[Mapping[Role, str]] = freeze(
    {
        "executor": "the executor (ExecStart=)",
        "waiter": "the readiness waiter (ExecStartPost=)",
        "model": "the model file",
    }
)
_FIX: Final[Mapping[Role, str]] = freeze(
    {
        "executor": (
            f"install it where the unit's user can reach it (docs/how-to/systemd.md: a copy of its "
            f"directory under {INSTALL_DIR}) and plan with --executor PATH"
        ),
        "waiter": (
            f"install exedra-engine where the unit's user can run it (docs/how-to/systemd.md: a "
            f"venv under {INSTALL_DIR}) and emit with --waiter PATH"
        ),
        "model": "move the model where the unit's user can read it (e.g. /var/lib/exedra/models)",
    }
)


def _why(f: PathFacts, *, dynamic: bool, private_tmp: bool, hidden_home: bool) -> str:
    if not f.steps:
        return ""
    for p in dict.fromkeys((f.path, f.real or f.path)):
        it = "it" if p == f.path else f"its target {p}"
        if private_tmp and p.startswith(_TMP):
            return f"{it} is under a /tmp that PrivateTmp= makes private to the unit"
        if hidden_home and p.startswith(_HOMES):
            return f"{it} is under {p[: p.index('/', 1) + 1]}, which ProtectHome=yes hides"
    # A fixed user's groups and ownership are not known here: only DynamicUser= is judged.
    return _closed(f) if dynamic else ""


def _closed(f: PathFacts, who: str = "DynamicUser=") -> str:
    """Which step other users are shut out of: a directory they cannot enter, or the file
    they cannot run (a program) or read (a model)."""
    *dirs, last = f.steps
    for d in dirs:
        if d.mode & _IFMT == _IFDIR and not d.mode & _IXOTH:
            return (
                f"{who} cannot enter {d.path} (mode {d.mode & 0o7777:04o}: closed to other users)"
            )
    need, verb = (_IROTH, "read") if f.role == "model" else (_IXOTH, "run")
    if not last.mode & need:
        return f"{who} cannot {verb} it (mode {last.mode & 0o7777:04o}: closed to other users)"
    return ""
