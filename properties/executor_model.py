"""An independent model of how llama-server reads its listen address and API keys.

Written from the executor's observed behaviour (shared/design/executors.md and the checks
in properties/test_endpoint_props.py against the real binary), not from the library's
tables: it knows only the flags the strategies generate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from properties.strategies import REPEATABLE, SWITCHES, VALUE_FLAGS

_TAKES_VALUE = {s for spellings in VALUE_FLAGS.values() for s in spellings} | set(REPEATABLE)
_TAKES_VALUE |= {"--api-key"}
_SWITCH = {s for on, off in SWITCHES.values() for s in on + off}


class Refused(Exception):
    """The executor would exit instead of listening."""


def std_stoi(text: str) -> int:
    i = 0
    while i < len(text) and text[i] in " \t\n\v\f\r":
        i += 1
    j = i
    if j < len(text) and text[j] in "+-":
        j += 1
    k = j
    while k < len(text) and "0" <= text[k] <= "9":
        k += 1
    if k == j:
        raise Refused(f"stoi: {text!r}")
    value = int(text[i:k])
    if not -(2**31) <= value < 2**31:
        raise Refused(f"stoi out of range: {text!r}")
    return value


def listen(args: Sequence[str], env: Mapping[str, str]) -> tuple[str, int, list[str]]:
    """(host, port, accepted keys) or Refused. Environment first, then argv in order."""
    host = env.get("LLAMA_ARG_HOST", "127.0.0.1") or "127.0.0.1"
    port = std_stoi(env["LLAMA_ARG_PORT"]) if "LLAMA_ARG_PORT" in env else None
    accepted = [k for k in env.get("LLAMA_API_KEY", "").split(",") if k]
    i = 0
    while i < len(args):
        tok = args[i]
        if "=" in tok and tok.startswith("--") and tok.split("=")[0] in _TAKES_VALUE | _SWITCH:
            raise Refused(f"invalid argument: {tok}")
        if tok in _TAKES_VALUE:
            if i + 1 >= len(args):
                raise Refused(f"{tok} needs a value")
            value = args[i + 1]
            if tok == "--host":
                host = value or "127.0.0.1"
            elif tok == "--port":
                port = std_stoi(value)
            elif tok == "--api-key":
                accepted += [k for k in value.split(",") if k]
            i += 2
        else:
            i += 1
    if port is None or not 0 < port < 65536:
        raise Refused("no usable port")
    return host, port, accepted
