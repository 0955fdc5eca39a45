"""``plan --emit``, ``emit PLAN.json`` and ``wait-ready``: the command line of the emitter.

Files go to stdout, or with ``--out DIR`` into DIR. ``--explain`` says where each field came
from (on stderr when the files go to stdout, so a pipe into kubectl stays clean). ``--check``
reads the files back (those in DIR when ``--out`` is given, else the ones just emitted) and
lists what is wrong with them; exit 1 when anything is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

import msgspec

from exedra_engine._core.targets import Storage, Target
from exedra_engine._core.values import Hardware, LaunchPlan
from exedra_engine.cli.render import PROG, shown
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EmitError, PlanError

if TYPE_CHECKING:
    from exedra_engine._core.emit import EmitOptions, Emitted
    from exedra_engine._core.layers import Source

# The emitter loads when a plan is emitted: `add_emit_options` builds every `plan`'s parser.

K8S_VERSION = "1.35"
"""The Kubernetes version `--check` validates against (with kubernetes-validate, if installed)."""


def add_emit_options(p: argparse.ArgumentParser, *, target_flag: str) -> None:
    g = p.add_argument_group("emit")
    g.add_argument(
        target_flag,
        dest="emit",
        choices=[t.value for t in Target],
        required=target_flag == "--target",
        help="render the plan for Kubernetes, systemd or Podman Quadlet",
    )
    g.add_argument("--out", metavar="DIR", help="write the files into DIR (default: stdout)")
    g.add_argument(
        "--check",
        action="store_true",
        help="check the files (in --out DIR if given, else the ones emitted) against the plan",
    )
    g.add_argument("--name", default="", help="object, unit and file name (default: the model id)")
    g.add_argument("--image", default="", help="container image (default: per backend)")
    g.add_argument("--image-command", default="", help="the executor's path in the image")
    g.add_argument("--secret", default="", help="Secret / podman secret with the key")
    g.add_argument("--key-file", default="", help="systemd: the key file (credential source)")
    g.add_argument(
        "--storage",
        choices=[s.value for s in Storage],
        default=Storage.PVC.value,
        help="Kubernetes model storage: a PVC (default), an image volume or a hostPath",
    )
    g.add_argument("--claim", default="", help="the PVC holding the models (default NAME-models)")
    g.add_argument(
        "--models-image", default="", help="the image holding the models (--storage image)"
    )
    g.add_argument("--models-dir", default="", help="the host directory holding the model files")
    g.add_argument("--namespace", default="", help="Kubernetes namespace")
    g.add_argument("--uid", type=int, default=65532, help="Kubernetes: the pod's user id")
    g.add_argument(
        "--stop-timeout", type=float, default=STOP_TIMEOUT, metavar="S", help="SIGTERM grace"
    )
    g.add_argument(
        "--start-budget", type=int, default=0, metavar="S", help="start budget (default: by size)"
    )
    g.add_argument(
        "--gpu-resource", default="", help="Kubernetes GPU resource (default: by driver)"
    )
    g.add_argument("--gpu-count", type=int, default=0, help="GPUs to ask for (default: all)")
    g.add_argument(
        "--waiter",
        default="/usr/bin/exedra-engine",
        metavar="PATH",
        help="systemd: the exedra-engine that runs wait-ready",
    )
    g.add_argument(
        "--publish-address", default="127.0.0.1", help="Quadlet: the host address to publish on"
    )


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
        stop_timeout=a.stop_timeout,
        start_budget=a.start_budget,
        gpu_resource=a.gpu_resource,
        gpu_count=a.gpu_count,
        waiter=a.waiter,
        publish_address=a.publish_address,
    )


def run_emit(
    plan: LaunchPlan,
    hardware: Hardware | None,
    a: argparse.Namespace,
    sources: Sequence[Source] = (),
) -> int:
    from exedra_engine._core.emit import emit_files
    from exedra_engine._core.redact import secret_copies

    target = Target(a.emit)
    copies = secret_copies(plan.args, plan.env)
    if copies:
        raise EmitError(
            f"the plan gives a copy of a secret (its API key, a token) to {', '.join(copies)}, "
            f"which the {target.value} output would have to carry in the clear; remove it from "
            "the plan"
        )
    emitted = emit_files(plan, target, options_from(a), hardware, sources)
    explain_to = sys.stdout if a.out else sys.stderr
    if a.check:
        return _check(plan, target, emitted, a)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, text in emitted.files.items():
            path = os.path.join(a.out, name)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            print(f"wrote {shown(path)}")
    else:
        for text in emitted.files.values():
            sys.stdout.write(text)
    if a.explain:
        print_origins(emitted, explain_to)
    return 0


def print_origins(emitted: Emitted, out: TextIO) -> None:
    print("\nwhere each emitted field came from:", file=out)
    for o in emitted.origins:
        why = f"  ({o.why})" if o.why else ""
        print(f"  {o.field:<30} {shown(o.value):<40} {o.source}{shown(why)}", file=out)


def _check(plan: LaunchPlan, target: Target, emitted: Emitted, a: argparse.Namespace) -> int:
    from exedra_engine._core.emit.checks import check_files

    files = dict(emitted.files)
    drift: list[str] = []
    if a.out:
        files = {}
        for name, text in emitted.files.items():
            path = os.path.join(a.out, name)
            try:
                with open(path, encoding="utf-8") as f:
                    files[name] = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise PlanError(f"{path}: cannot read: {e}") from None
            if files[name] != text:
                drift.append(name)
    problems = check_files(plan, target, files)
    if target is Target.K8S:
        problems += _schema(files)
    for name in drift:
        print(f"note: {shown(name)} differs from what the plan emits (edited by hand?)")
    for p in problems:
        print(f"{PROG}: check: {shown(p)}", file=sys.stderr)
    if not problems:
        print(f"ok: {', '.join(shown(n) for n in files)} match the plan ({target.value})")
    return 1 if problems else 0


def _schema(files: dict[str, str]) -> list[str]:
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


def load_plan(path: str) -> LaunchPlan:
    """A saved plan (``plan --json``), decoded strictly; the `PlanError` names the file and
    field."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 22)
    except OSError as e:
        raise PlanError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return msgspec.json.decode(data, type=LaunchPlan)
    except msgspec.ValidationError as e:
        what, sep, at = str(e).rpartition(" - at ")
        raise PlanError(f"{path}: {at.strip('`')}: {what}" if sep else f"{path}: {e}") from None
    except msgspec.DecodeError as e:
        raise PlanError(f"{path}: not JSON ({e})") from None


def cmd_wait_ready(a: argparse.Namespace) -> int:
    """Ask URL until it answers 200 (exit 0) or the timeout passes (exit 1)."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(a.url)
    if u.scheme != "http" or not u.hostname:
        raise PlanError(f"wait-ready: {a.url!r} is not an http:// URL")
    deadline = time.monotonic() + a.timeout
    last = "no answer"
    while True:
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=5)
        try:
            conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""))
            status = conn.getresponse().status
            if status == 200:
                return 0
            last = f"status {status}"
        except (OSError, http.client.HTTPException) as e:
            last = str(e) or type(e).__name__
        finally:
            conn.close()
        if time.monotonic() + a.interval > deadline:
            said = f"{shown(a.url)} did not answer 200 in {a.timeout:g} s ({shown(last)})"
            print(f"{PROG}: error: {said}", file=sys.stderr)
            return 1
        time.sleep(a.interval)
