"""Endpoint resolution: where an executor will listen, read from argv and env the way the
executor itself reads them.

Driven by the executor's profile (`exedra_engine._core.executors.profile`); the rules were checked
against the real llama-server (build 0.10434) and whisper-server 1.8.5:

- The executor reads its environment first, then argv: a flag beats its variable, and the
  last of repeated flags wins. A variable it cannot parse is fatal even when a flag also
  sets the option. Every API key counts: the key variable's and each key flag's, lists
  split at the profile's separator, all accepted together.
- Ports are parsed like C++ ``std::stoi``: leading blanks and a sign, then digits; anything
  after the digits is ignored ("8092abc" is 8092), no digits is fatal.
- An executor whose profile names no variables (whisper-server) reads none.
- Neither accepts ``--flag=value``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.outcome import boundary
from exedra_engine._core.struct import Value
from exedra_engine._core.values import base_url
from exedra_engine.constants import DEFAULT_HOST
from exedra_engine.errors import NoEndpoint, PlanError

_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")
_INT32 = 2**31


class Resolved(Value, frozen=True, kw_only=True):
    """Where an executor listens and which API keys it accepts."""

    host: str
    port: int
    api_keys: tuple[str, ...] = ()

    @property
    def api_key(self) -> str:
        """The key clients use: the first accepted one, "" when unauthenticated."""
        return self.api_keys[0] if self.api_keys else ""

    @property
    def url(self) -> str:
        """The base URL clients use (loopback for wildcard binds)."""
        return base_url(self.host, self.port)


def stoi(text: str) -> int | None:
    """C++ ``std::stoi``: the leading integer of `text`, or None where stoi throws."""
    m = _STOI.match(text)
    if m is None:
        return None
    value = int(m.group(1))
    return value if -_INT32 <= value < _INT32 else None


def env_dict(env: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE strings as a mapping; a later entry replaces an earlier one."""
    out: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if sep and name:
            out[name] = value
    return out


def env_map(env: Mapping[str, str] | Sequence[str]) -> Mapping[str, str]:
    """`env` as a mapping: itself when it is one (a merge's `env_map`), else `env_dict`."""
    # A dict (a FrozenDict is one) is tested first: the Mapping ABC's test costs more than
    # the whole read-back that follows.
    return env if isinstance(env, dict | Mapping) else env_dict(env)


def resolve(
    kind: str,
    args: Sequence[str],
    env: Mapping[str, str] | Sequence[str],
    *,
    executors: Executors = BUILTIN,
) -> Resolved:
    """Resolve host, port and API keys from an executor's argv and added environment.

    `env` is what the plan adds to the executor's environment (a mapping or KEY=VALUE
    strings). Failures: `NoEndpoint` when nothing names a port or the host is a Unix
    socket; `PlanError` for a value the executor would refuse (naming the flag or variable);
    `UnsupportedKind` for a kind `executors` does not have.
    """
    return resolve_for(executors.profile(kind), args, env)


resolve_endpoint = boundary(resolve)
"""`resolve` as a Result: ``Success(Resolved)``, or ``Failure`` with its `EngineError`."""


def resolve_for(
    p: ExecutorProfile, args: Sequence[str], env: Mapping[str, str] | Sequence[str]
) -> Resolved:
    """`resolve` for the executor of `p`."""
    envmap = env_map(env)
    # The executor reads its environment first, then argv: a flag beats its variable.
    host, port, keys = _from_env(p, envmap)
    h, pt, k = _from_args(p, args)
    host = h if h is not None else host
    port = pt if pt is not None else port
    return _endpoint(p, host, port, (*keys, *k))


def resolve_merged(
    p: ExecutorProfile,
    args: Sequence[str],
    settings: Mapping[str, tuple[str, ...]],
    env: Mapping[str, str] | Sequence[str],
) -> Resolved:
    """`resolve_for` an argv the merge produced, from its `settings` (the winning value of
    each non-repeatable known flag): the merge has already cut the argv as the executor does,
    so walking it again would find the same values."""
    if p.key_flag and not p.key_env:  # its keys stay in argv, repeated: walk it
        return resolve_for(p, args, env)
    envmap = env_map(env)
    host, port, keys = _from_env(p, envmap)
    if p.host_flag in settings:
        host = settings[p.host_flag][0]
    if p.port_flag in settings:
        value = settings[p.port_flag][0]
        port = _port(value, f"{p.port_flag} {value!r}")
    return _endpoint(p, host, port, tuple(keys))


def _from_env(
    p: ExecutorProfile, env: Mapping[str, str]
) -> tuple[str | None, int | None, list[str]]:
    host = env.get(p.host_env) if p.host_env else None
    port = None
    if p.port_env and p.port_env in env:
        port = _port(env[p.port_env], f"{p.port_env}={env[p.port_env]!r}")
    keys = _keys(p, env.get(p.key_env, "")) if p.key_env else []
    return host, port, keys


def _from_args(p: ExecutorProfile, args: Sequence[str]) -> tuple[str | None, int | None, list[str]]:
    host: str | None = None
    port: int | None = None
    keys: list[str] = []
    # In argv order, as the executor reads it: the first refused item is the error.
    for it in p.flags.read_items(args):
        if it.key is None:
            continue
        tok = it.tokens[0]
        if it.inline:
            raise PlanError(
                f"{p.binary} does not accept {tok}=...; pass {tok} and its value as two arguments"
            )
        if it.problem is not None:
            raise PlanError(f"{p.binary}: flag {tok} needs a value")
        value = it.values[0] if it.values else ""
        if it.key == p.host_flag:
            host = value
        elif it.key == p.port_flag:
            port = _port(value, f"{tok} {value!r}")
        elif it.key == p.key_flag:
            keys.extend(_keys(p, value))
    return host, port, keys


def _port(value: str, shown: str) -> int:
    port = stoi(value)
    if port is None:
        raise PlanError(f"{shown} is not a port number")
    return port


def _keys(p: ExecutorProfile, value: str) -> list[str]:
    return [k for k in value.split(p.key_separator) if k]


def _endpoint(
    p: ExecutorProfile, host: str | None, port: int | None, keys: tuple[str, ...]
) -> Resolved:
    if port is None:
        via = f" or {p.port_env}" if p.port_env else ""
        raise NoEndpoint(f"{p.binary}: args and env set no listen port ({p.port_flag}{via})")
    if not 0 < port < 65536:
        raise PlanError(f"port {port} is outside 1-65535")
    if not host:
        host = DEFAULT_HOST
    if p.unix_socket_suffix and host.endswith(p.unix_socket_suffix):
        raise NoEndpoint(f"{p.host_flag} {host!r} is a Unix socket; only TCP is supported")
    if not _is_host(host):
        # Refused here, not by the executor: its bind error on such a value names no cause.
        raise PlanError(f"{p.host_flag} {host!r} is neither an IP address nor a host name")
    return Resolved(host=host, port=port, api_keys=keys)


_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)


def _is_host(host: str) -> bool:
    """A host name (RFC 1123 labels, ``_`` tolerated) or an IP literal, IPv6 bracketed or not."""
    if _HOST_NAME.fullmatch(host):
        return True
    import ipaddress  # only for what is no host name: a cold plan for a name never needs it

    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    except ValueError:
        return False
    return True
