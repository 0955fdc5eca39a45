"""What an emit hands out, for ``emit``, ``plan --emit`` and a group's emit alike: the
emit options as `EmitOptions`, the files to stdout or into ``--out DIR``, where each field
came from, and the files read back for ``--check``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from exedra_engine._core.targets import Selinux, Storage
from exedra_engine.cli import options
from exedra_engine.cli.render import PROG, fail, shown
from exedra_engine.errors import PlanError

if TYPE_CHECKING:
    from exedra_engine._core.emit import EmitOptions, Emitted

K8S_VERSION = "1.35"
"""The Kubernetes version `--check` validates against (with kubernetes-validate, if installed)."""


def options_from(a: argparse.Namespace) -> EmitOptions:
    from exedra_engine._core.emit import EmitOptions

    return EmitOptions(
        name=a.name,
        image=a.image,
        image_command=a.image_command,
        secret=a.secret,
        key_file=a.key_file,
        storage=Storage(a.storage),
        claim=a.claim,
        models_image=a.models_image,
        models_dir=a.models_dir,
        namespace=a.namespace,
        uid=a.uid,
        gpu_groups=tuple(a.gpu_groups),
        stop_timeout=a.stop_timeout,
        start_budget=a.start_budget,
        gpu_resource=a.gpu_resource,
        gpu_count=a.gpu_count,
        waiter=a.waiter or installed_waiter(),
        publish_address=a.publish_address,
        selinux=Selinux(a.selinux),
    )


def installed_waiter() -> str:
    """The real path of the exedra-engine command the unit's readiness hook runs: the one on
    PATH (this installation's), else the conventional /usr/bin/exedra-engine."""
    import shutil  # with its zlib, bz2 and lzma: ~1.5 ms a plain plan does not spend

    found = shutil.which("exedra-engine")
    if found:
        return os.path.realpath(found)
    from exedra_engine._core.emit import EmitOptions

    return EmitOptions().waiter


def hand_out(emitted: Emitted, a: argparse.Namespace, *, private: bool = False) -> int:
    """The files into ``--out`` DIR (mode 0600 when `private`: a file that may hold what a
    unit must not show, else 0644), or to stdout; then, with ``--explain``, where each field
    came from (on stderr when the files went to stdout). The exit status."""
    if a.out:
        if (code := _write(a.out, emitted, 0o600 if private else 0o644)) != 0:
            return code
    else:
        for text in emitted.files.values():
            sys.stdout.write(text)
    if a.explain and emitted.origins:
        print_origins(emitted, sys.stdout if a.out else sys.stderr)
    return 0


def _write(out: str, emitted: Emitted, mode: int) -> int:
    """Write the files into the directory `out`: 0, or the exit status of a refusal."""
    from exedra_engine._shell.local.files import write_inside

    if (refused := options.out_dir(out, list(emitted.files))) is not None:
        return fail(refused)
    for name, text in emitted.files.items():
        path = os.path.join(out, name)
        try:
            write_inside(out, name, text.encode("utf-8"), mode)  # never through a link
        except OSError as e:  # a disk full or a race with another writer
            return fail(PlanError(f"--out: cannot write {path}: {e.strerror or e}"), 1)
        print(f"wrote {shown(path)}")
    return 0


def print_origins(emitted: Emitted, out: TextIO) -> None:
    print("\nwhere each emitted field came from:", file=out)
    for o in emitted.origins:
        said = o.why or (f"set by the {o.layer} layer" if o.layer else "")
        why = f"  ({said})" if said else ""
        print(f"  {o.field:<38} {shown(o.value):<40} {o.source}{shown(why)}", file=out)


def read_back(out: str, files: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The files named in `files` as they stand in the directory `out`, and the names of
    those that differ from what was emitted (edited by hand?); `PlanError` naming a file
    that cannot be read."""
    from exedra_engine._shell.local.files import read_regular

    found: dict[str, str] = {}
    drift: list[str] = []
    for name, text in files.items():
        path = os.path.join(out, name)
        try:
            found[name] = read_regular(path, 1 << 22).decode("utf-8")
        except OSError as e:
            raise PlanError(f"{path}: cannot read: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise PlanError(f"{path}: cannot read: {e}") from None
        if found[name] != text:
            drift.append(name)
    return found, drift


def checked(files: dict[str, str], drift: list[str], problems: list[str], target: str) -> int:
    """Say what ``--check`` found (a note per file edited by hand, a line per problem, else
    ``ok``); the exit status: 1 when anything is wrong."""
    for name in drift:
        print(f"note: {shown(name)} differs from what the plan emits (edited by hand?)")
    for p in problems:
        print(f"{PROG}: check: {shown(p)}", file=sys.stderr)
    if not problems:
        verb = "matches" if len(files) == 1 else "match"
        print(f"ok: {', '.join(shown(n) for n in files)} {verb} the plan ({target})")
    return 1 if problems else 0


def k8s_schema_problems(files: dict[str, str]) -> list[str]:
    """What the Kubernetes schema of `K8S_VERSION` rejects in `files` (strictly: an unknown
    field too), with kubernetes-validate if it is installed (a note says when it is not)."""
    try:
        import kubernetes_validate  # type: ignore[import-untyped,import-not-found,unused-ignore]
        import yaml
    except ImportError:
        print("note: kubernetes-validate is not installed: semantic checks only", file=sys.stderr)
        return []
    out = []
    for name, text in files.items():
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError:
            continue  # the semantic checks said so already
        for d in docs:
            try:
                kubernetes_validate.validate(d, K8S_VERSION, strict=True)
            except Exception as e:
                out.append(f"{name}: {d.get('kind', '?')} fails the {K8S_VERSION} schema: {e}")
    return out
