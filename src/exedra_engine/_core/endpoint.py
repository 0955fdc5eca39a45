"""Endpoint resolution: where an executor will listen, read from argv and env the way the
executor itself reads them.

Checked against the real llama-server (build 0.10434) and whisper-server 1.8.5:

- llama-server reads its environment first, then argv: a flag beats its variable, and the
  last of repeated flags wins. A variable it cannot parse is fatal even when a flag also
  sets the option. Every API key counts: ``LLAMA_API_KEY`` and each ``--api-key``, comma lists
  split, all accepted together.
- Ports are parsed like C++ ``std::stoi``: leading blanks and a sign, then digits; anything
  after the digits is ignored ("8092abc" is 8092), no digits is fatal.
- whisper-server reads no variables and has no API key.
- Neither accepts ``--flag=value``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec
from returns.result import Failure, Result, Success

from exedra_engine._core.flags import TABLES
from exedra_engine._core.kinds import Kind
from exedra_engine._core.values import base_url
from exedra_engine.constants import DEFAULT_HOST
from exedra_engine.errors import EngineError, NoEndpoint, PlanError

_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")
_INT32 = 2**31


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
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


def resolve_endpoint(
    kind: Kind, args: Sequence[str], env: Mapping[str, str] | Sequence[str]
) -> Result[Resolved, EngineError]:
    """Resolve host, port and API keys from an executor's argv and added environment.

    `env` is what the plan adds to the executor's environment (a mapping or KEY=VALUE
    strings). Failures: `NoEndpoint` when nothing names a port or the host is a Unix
    socket; `PlanError` for a value the executor would refuse (naming the flag or variable).
    """
    try:
        return Success(resolve(kind, args, env))
    except EngineError as e:
        return Failure(e)


def resolve(kind: Kind, args: Sequence[str], env: Mapping[str, str] | Sequence[str]) -> Resolved:
    """`resolve_endpoint`, raising the `EngineError` instead of returning it."""
    table = TABLES[kind]
    envmap = env if isinstance(env, Mapping) else env_dict(env)
    host: str | None = None
    port: int | None = None
    keys: list[str] = []
    if kind is Kind.LLAMA:
        if "LLAMA_ARG_HOST" in envmap:
            host = envmap["LLAMA_ARG_HOST"]
        if "LLAMA_ARG_PORT" in envmap:
            port = stoi(envmap["LLAMA_ARG_PORT"])
            if port is None:
                raise PlanError(f"LLAMA_ARG_PORT={envmap['LLAMA_ARG_PORT']!r} is not a port number")
        keys.extend(k for k in envmap.get("LLAMA_API_KEY", "").split(",") if k)
    i = 0
    while i < len(args):
        tok = args[i]
        hit = table.lookup(tok)
        if hit is None:
            name = tok.partition("=")[0]
            if "=" in tok and table.lookup(name) is not None:
                raise PlanError(
                    f"{table.binary} does not accept {name}=...; pass {name} and its value "
                    "as two arguments"
                )
            i += 1
            continue
        flag, negated = hit
        nargs = 0 if negated else flag.nargs
        if nargs and i + nargs >= len(args):
            raise PlanError(f"{table.binary}: flag {tok} needs a value")
        value = args[i + 1] if nargs else ""
        if flag.key == "--host":
            host = value
        elif flag.key == "--port":
            port = stoi(value)
            if port is None:
                raise PlanError(f"{tok} {value!r} is not a port number")
        elif flag.key == "--api-key":
            keys.extend(k for k in value.split(",") if k)
        i += 1 + nargs
    if port is None:
        raise NoEndpoint(
            f"{table.binary}: args and env set no listen port (--port"
            + (" or LLAMA_ARG_PORT)" if kind is Kind.LLAMA else ")")
        )
    if not 0 < port < 65536:
        raise PlanError(f"port {port} is outside 1-65535")
    if host is None or host == "":
        host = DEFAULT_HOST
    if kind is Kind.LLAMA and host.endswith(".sock"):
        raise NoEndpoint(f"--host {host!r} is a Unix socket; only TCP is supported")
    return Resolved(host=host, port=port, api_keys=tuple(keys))
