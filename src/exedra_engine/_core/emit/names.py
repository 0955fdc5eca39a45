"""The emitter's options and names, validated where they are read: every rule that a target
(the Kubernetes API server, the kubelet, systemd, Podman) would refuse later is refused here,
with the option's name. Pure; used by the command line's argument types and by `shape`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from exedra_engine.errors import EmitError

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
"""A Service name (RFC 1035 label): it starts with a letter."""
DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A namespace, a label-named object (RFC 1123 label)."""
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A Secret, a PersistentVolumeClaim (RFC 1123 subdomain, at most 253)."""
QUALIFIED = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
"""An extended resource name (``vendor.example/name``)."""
# An OCI reference: [registry[:port]/]path[:tag][@algorithm:hex] (distribution/reference).
_IMAGE = re.compile(
    r"(?:[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(?:\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")

NAME_MAX = 52
"""The longest derived name: NAME-api-key and NAME-models stay within 63 characters."""
HASH_LEN = 6


def label(value: str, what: str, *, service: bool = False) -> str:
    """`value` if it is an RFC 1123 label (RFC 1035 for a Service name), else EmitError."""
    rule = DNS1035 if service else DNS1123
    if len(value) > 63 or not rule.fullmatch(value):
        start = "a letter" if service else "a letter or digit"
        raise EmitError(
            f"{what} {value!r} is not a DNS label (lower-case letters, digits and '-', at most "
            f"63, starting with {start} and ending with a letter or digit)"
        )
    return value


def subdomain(value: str, what: str) -> str:
    """`value` if it is an RFC 1123 subdomain (a Secret, a claim), else EmitError."""
    if len(value) > 253 or not SUBDOMAIN.fullmatch(value):
        raise EmitError(
            f"{what} {value!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.', "
            "at most 253)"
        )
    return value


def derived_name(base: str, fallback: str) -> tuple[str, bool]:
    """A name every target accepts (an RFC 1035 label of at most `NAME_MAX`) made from
    `base` (the model id or file stem), and whether it had to be changed. A changed name ends
    in a short hash of `base`, so two ids that normalise or cut alike stay apart."""
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")
    if name == base and len(name) <= NAME_MAX and DNS1035.fullmatch(name):
        return name, False
    digest = hashlib.sha256(base.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LEN]
    if not name:
        name = fallback
    elif not name[0].isalpha():
        name = "m-" + name
    name = name[: NAME_MAX - HASH_LEN - 1].strip("-")
    return f"{name}-{digest}", True


def port(value: int, what: str) -> int:
    """`value` if it is a TCP port (1-65535)."""
    if not 1 <= value <= 65535:
        raise EmitError(f"{what} {value} is not a TCP port (1-65535)")
    return value


def non_negative(value: int, what: str) -> int:
    if value < 0:
        raise EmitError(f"{what} {value} is negative")
    return value


def non_root_uid(value: int, what: str) -> int:
    """A uid the restricted Pod Security profile accepts (runAsNonRoot: 1 to 2^31-1)."""
    if not 1 <= value <= 2**31 - 1:
        raise EmitError(
            f"{what} {value} is not a non-root uid (1-2147483647): the pod is restricted"
        )
    return value


def address(value: str, what: str) -> str:
    """An IP address ("" = every address)."""
    if value == "":
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise EmitError(f"{what} {value!r} is not an IP address") from None
    return value


def image(value: str, what: str) -> str:
    """An OCI image reference (a tag, a digest, or both)."""
    if len(value) > 1024 or not _IMAGE.fullmatch(value):
        raise EmitError(
            f"{what} {value!r} is not an image reference (registry/path[:tag][@sha256:digest])"
        )
    return value


def resource(value: str, what: str) -> str:
    """A Kubernetes extended resource name (``nvidia.com/gpu``)."""
    if not QUALIFIED.fullmatch(value) or len(value) > 253:
        raise EmitError(f"{what} {value!r} is not a qualified resource name (vendor.example/name)")
    return value


def absolute_path(value: str, what: str) -> str:
    if value and (not value.startswith("/") or "\0" in value or "\n" in value):
        raise EmitError(f"{what} {value!r} is not an absolute path")
    return value
