"""``emit PLAN.json`` and ``plan --emit``: the command line of the emitter.

Files go to stdout, or with ``--out DIR`` into DIR. ``--explain`` says where each field came
from (on stderr when the files go to stdout, so a pipe into kubectl stays clean). ``--check``
reads the files back (those in DIR when ``--out`` is given, else the ones just emitted) and
lists what is wrong with them; exit 1 when anything is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.targets import Selinux, Storage, Target
from exedra_engine._core.values import Hardware
from exedra_engine.cli import options
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import PROG, shown
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EmitError, EmitRefused, EngineError

if TYPE_CHECKING:
    from exedra_engine._core.emit import Emitted, Origin
    from exedra_engine._core.plan.provenance import Source

# The emitter (its validators included) loads when an emit option is given or a plan is
# emitted: `add_emit_options` builds every `plan`'s parser, and a plain plan emits nothing.

T = TypeVar("T")


def _checked(
    rule: str | Callable[[T, str], T],
    what: str,
    convert: Callable[[str], T],
    expected: str,
    *,
    default: str = "",
) -> Any:
    """An argparse type: the value converted, then validated by the emitter's own rule (a
    function, or the name of one in `exedra_engine._core.emit.names`, looked up when a value
    is given), so a bad value is refused where it is parsed (exit 2, naming the option and
    `expected`, never echoing the value: it may be a key pasted into the wrong option)."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
            if value == "" or text == default:
                # "" is each text option's "derive it"; argparse types a string default too,
                # and ours are valid: a plain plan does not load the emitter to check them.
                return value
            if isinstance(rule, str):
                from exedra_engine._core.emit import names

                check: Callable[[T, str], T] = getattr(names, rule)
            else:
                check = rule
            return check(value, what)
        except (ValueError, EmitError):
            raise argparse.ArgumentTypeError(expected) from None

    parse.__name__ = what
    parse.expected = expected  # type: ignore[attr-defined]
    return parse


SERVICE = (
    "an RFC 1035 label (lower-case letters, digits and '-', at most 63, starting with a letter)"
)
LABEL = "an RFC 1123 label (lower-case letters, digits and '-', at most 63)"
SUBDOMAIN_TEXT = "an RFC 1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)"
IMAGE = "an image reference (registry/path[:tag][@sha256:digest])"
PATH = "an absolute path"
UID = "a non-root id (1-2147483647): the pod is restricted"
COUNT = "a non-negative integer"


def _service_name(value: str, what: str) -> str:
    from exedra_engine._core.emit import names

    return names.label(value, what, service=True)


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser(
        "emit",
        help="render a saved plan (plan --json, plan --group --json) for Kubernetes, systemd "
        "or Quadlet (a group's also for llama.cpp's router or llama-swap)",
    )
    s.add_argument(
        "plan",
        metavar="PLAN.json",
        help="a plan saved with plan --json, or a group's with plan --group --json (emitted "
        "as saved: nothing is probed or planned again)",
    )
    s.add_argument(
        "--hardware",
        metavar="FILE",
        help="the hardware file the plan was made for (names the GPU resource)",
    )
    s.add_argument("--explain", action="store_true", help="say where each field came from")
    s.add_argument(
        "--strict",
        action="store_true",
        help="a group plan: refuse (exit 2, nothing written) a member the plan could not "
        "size, whose files would get no memory limit (a warning without --strict)",
    )
    add_emit_options(s, target_flag="--target")
    s.set_defaults(func=emit_command)


def emit_command(a: argparse.Namespace) -> int:
    from exedra_engine._shell.hardware_file import read_hardware
    from exedra_engine.cli.plan.saved_plan import load_saved

    hw = read_hardware(a.hardware, executors=a.executors) if a.hardware else None
    saved = load_saved(a.plan)
    if isinstance(saved, LaunchPlan):
        if a.emit in options.GROUP_ONLY:
            raise EngineError(f"--target {a.emit} serves several models: give a saved group plan")
        return run_emit(saved, hw, a)
    from exedra_engine.cli.plan.emit_group import run_group_emit

    return run_group_emit(saved, hw, a)


def add_emit_options(p: argparse.ArgumentParser, *, target_flag: str) -> None:
    g = p.add_argument_group("emit")
    g.add_argument(
        target_flag,
        dest="emit",
        # router and llama-swap: a group's (plan --group FILE --emit ..., emit GROUP.json)
        choices=[t.value for t in Target] + list(options.GROUP_ONLY),
        required=target_flag == "--target",
        help="render the plan for Kubernetes, systemd or Podman Quadlet (a group's router or "
        "llama-swap config: plan --group FILE --emit router|llama-swap, or emit GROUP.json "
        "--target router|llama-swap for a group plan saved with plan --group --json)",
    )
    g.add_argument("--out", metavar="DIR", help="write the files into DIR (default: stdout)")
    g.add_argument(
        "--check",
        action="store_true",
        help="check the files (in --out DIR if given, else the ones emitted) against the plan "
        "(a group's: every member's)",
    )
    text = str
    g.add_argument(
        "--name",
        default="",
        type=_checked(_service_name, "name", text, SERVICE),
        help="object, unit and file name, an RFC 1035 label (default: the model id)",
    )
    g.add_argument(
        "--image",
        default="",
        type=_checked("image", "image", text, IMAGE),
        help="container image, best pinned by digest (IMAGE@sha256:...; default: per backend)",
    )
    g.add_argument(
        "--image-command",
        default="",
        type=_checked("absolute_path", "image command", text, PATH),
        help="the executor's path in the image",
    )
    g.add_argument(
        "--secret",
        default="",
        type=_checked("subdomain", "secret", text, SUBDOMAIN_TEXT),
        help="Secret / podman secret with the key",
    )
    g.add_argument(
        "--key-file",
        default="",
        type=_checked("absolute_path", "key file", text, PATH),
        help="systemd: the key file (credential source)",
    )
    g.add_argument(
        "--storage",
        choices=[s.value for s in Storage],
        default=Storage.PVC.value,
        help="Kubernetes model storage: a PVC (default), an image volume or a hostPath",
    )
    g.add_argument(
        "--claim",
        default="",
        type=_checked("subdomain", "claim", text, SUBDOMAIN_TEXT),
        help="the PVC holding the models (default NAME-models)",
    )
    g.add_argument(
        "--models-image",
        default="",
        type=_checked("image", "models image", text, IMAGE),
        help="the image holding the models (--storage image)",
    )
    g.add_argument(
        "--models-dir",
        default="",
        type=_checked("absolute_path", "models dir", text, PATH),
        help="the host directory holding the model files",
    )
    g.add_argument(
        "--namespace",
        default="",
        type=_checked("label", "namespace", text, LABEL),
        help="Kubernetes namespace",
    )
    g.add_argument(
        "--uid",
        type=_checked("non_root_uid", "uid", int, UID),
        default=65532,
        help="Kubernetes and Quadlet: the user (and group) id the executor runs as in its "
        "container (never 0)",
    )
    g.add_argument(
        "--gpu-group",
        dest="gpu_groups",
        action="append",
        default=[],
        metavar="GID",
        type=_checked("non_root_uid", "gpu group", int, UID),
        help="Kubernetes: a supplementary group of the pod, e.g. the node's render gid "
        "(AMD and Intel device nodes are root:render 0660); repeatable",
    )
    g.add_argument(
        "--stop-timeout",
        type=options.seconds,
        default=STOP_TIMEOUT,
        metavar="S",
        help="SIGTERM grace",
    )
    g.add_argument(
        "--start-budget",
        type=_checked("non_negative", "start budget", int, COUNT),
        default=0,
        metavar="S",
        help="start budget (default: by the size of every file loaded)",
    )
    g.add_argument(
        "--gpu-resource",
        default="",
        type=_checked(
            "resource", "gpu resource", text, "a qualified resource name (vendor.example/name)"
        ),
        help="Kubernetes GPU resource (default: by driver)",
    )
    g.add_argument(
        "--gpu-count",
        type=_checked("non_negative", "gpu count", int, COUNT),
        default=0,
        help="GPUs to ask for (default: all)",
    )
    g.add_argument(
        "--waiter",
        default="",
        metavar="PATH",
        type=_checked("absolute_path", "waiter", text, PATH),
        help="systemd: the exedra-engine that runs wait-ready (default: this one's real path)",
    )
    g.add_argument(
        "--publish-address",
        default="127.0.0.1",
        type=_checked(
            "address",
            "publish address",
            text,
            "an IP address ('' = every address)",
            default="127.0.0.1",
        ),
        help="Quadlet: the host address to publish on ('' = every address)",
    )
    g.add_argument(
        "--selinux",
        choices=[s.value for s in Selinux if s.value],
        default="",
        help="Quadlet: label the model binds for SELinux: shared (:z), private (:Z), or "
        "disable separation (SecurityLabelDisable=true)",
    )


def plan_real_paths(plan: LaunchPlan, models_dir: str = "") -> tuple[tuple[str, str], ...]:
    """Where each absolute path of the plan (and `models_dir`) resolves here, for those that
    are links (`exedra_engine._shell.local.files.real_paths`): the emitter judges a directory by
    what it is, and is pure."""
    from exedra_engine._shell.local.files import real_paths as resolved

    words = [*plan.args, *(e.partition("=")[2] for e in plan.env), *(f.path for f in plan.files)]
    if plan.model is not None:
        words.append(plan.model.path)
    if models_dir:
        words.append(models_dir)
    return resolved(w.partition("=")[2] if w.startswith("-") else w for w in words)


def host_default() -> Origin:
    """Where the bind address came from when a container target chose it."""
    from exedra_engine._core.emit import Origin

    return Origin(
        field="host",
        value="0.0.0.0",
        source="default",
        why="a container target binds every address when the caller sets no --host: the "
        "probes and the Service reach the pod from outside it",
    )


def run_emit(
    plan: LaunchPlan,
    hardware: Hardware | None,
    a: argparse.Namespace,
    sources: Sequence[Source] = (),
    *,
    host_defaulted: bool = False,
) -> int:
    from exedra_engine._core.emit import emit_files
    from exedra_engine._core.emit.checks import copies_problem
    from exedra_engine._core.secrets import secret_copies
    from exedra_engine.cli.emit_out import hand_out, options_from

    target = Target(a.emit)
    copies = secret_copies(plan.args, plan.env, executors=a.executors)
    if copies:
        raise EmitError(copies_problem(copies, target.value))
    opts = options_from(a)
    opts = msgspec.structs.replace(opts, real_paths=plan_real_paths(plan, opts.models_dir))
    try:
        emitted = emit_files(plan, target, opts, hardware, sources, executors=a.executors)
        _refuse_unreachable(plan, target, emitted.files, a)
    except EmitRefused as refused:
        # One line per problem, and no file: what --check rejects is never written.
        for problem in refused.problems:
            print(f"{PROG}: error: {shown(problem)}", file=sys.stderr)
        return 2
    if host_defaulted and plan.host == "0.0.0.0":
        # The emitter saw only the plan's host ("set by the engine layer"); this row says
        # why it is 0.0.0.0, in its place: one host row, not two.
        chosen = host_default()
        origins = tuple(chosen if o.field == "host" else o for o in emitted.origins)
        if chosen not in origins:
            origins = (chosen, *origins)
        emitted = msgspec.structs.replace(emitted, origins=origins)
    if a.check:
        return _check(plan, target, emitted, a)
    return hand_out(emitted, a)


def _check(plan: LaunchPlan, target: Target, emitted: Emitted, a: argparse.Namespace) -> int:
    from exedra_engine._core.emit.checks import check_files
    from exedra_engine.cli.emit_out import checked, k8s_schema_problems, read_back

    files, drift = read_back(a.out, emitted.files) if a.out else (emitted.files, [])
    problems = check_files(plan, target, files, executors=a.executors)
    problems += _unreachable(plan, target, files, a)
    if target is Target.K8S:
        problems += k8s_schema_problems(files)
    return checked(files, drift, problems, target.value)


def _refuse_unreachable(
    plan: LaunchPlan, target: Target, files: dict[str, str], a: argparse.Namespace
) -> None:
    """`EmitRefused` for a unit that cannot start on this host, as for any refusal: it is
    not written (``--check`` lists the same problems as its findings instead)."""
    if not a.check and (problems := _unreachable(plan, target, files, a)):
        raise EmitRefused(tuple(problems))


def _unreachable(
    plan: LaunchPlan, target: Target, files: dict[str, str], a: argparse.Namespace
) -> list[str]:
    from exedra_engine._shell.local.path_modes import unreachable

    return unreachable(plan, target, files, a.executors)
