"""``exedra-engine wait-ready URL``: wait until the executor answers 200, the readiness step
of an emitted systemd unit (its ExecStartPost)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from exedra_engine.cli import options
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import PROG, shown
from exedra_engine.errors import PlanError

if TYPE_CHECKING:
    import urllib.parse


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("wait-ready", help="wait until a URL answers 200 (a unit's readiness)")
    s.add_argument("url", help="the executor's ready URL, e.g. http://127.0.0.1:8080/health")
    s.add_argument(
        "--timeout", type=options.seconds, default=300.0, metavar="S", help="default 300"
    )
    s.add_argument("--interval", type=options.seconds, default=1.0, metavar="S", help="default 1")
    s.set_defaults(func=wait_ready_command)


def wait_ready_command(a: argparse.Namespace) -> int:
    """Ask URL until it answers 200 (exit 0) or the timeout passes (exit 1)."""
    import http.client

    url = shown_url(a.url)
    u, host, port = _read_url(a.url, url)
    start = time.monotonic()
    deadline = start + a.timeout
    last, attempts = "no answer", 0
    while True:
        # One attempt never runs past the deadline: the timeout is what is waited, no more.
        remaining = deadline - time.monotonic()
        conn = http.client.HTTPConnection(host, port or 80, timeout=min(5.0, max(remaining, 0.1)))
        attempts += 1
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
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waited = time.monotonic() - start
            said = (
                f"{url} did not answer 200 in {waited:.1f} s ({attempts} attempt"
                f"{'s' * (attempts != 1)}, --timeout {a.timeout:g}; last: {shown(last)})"
            )
            print(f"{PROG}: error: {said}", file=sys.stderr)
            return 1
        # The last attempt is made at the deadline, not an interval before it.
        time.sleep(min(a.interval, remaining))


def _read_url(raw: str, url: str) -> tuple[urllib.parse.SplitResult, str, int | None]:
    """`raw` split, its host and its port; refused, named as `url`, unless an http:// URL."""
    import urllib.parse

    try:
        u = urllib.parse.urlsplit(raw)
        host, port = u.hostname, u.port
    except ValueError as e:
        # urllib's own words echo the port it could not read: ours name the part only.
        why = (
            "its port is not from 1 to 65535"
            if "out of range" in str(e)
            else "its port is not a number"
            if "Port" in str(e)
            else "its host cannot be read (an IPv6 address in brackets?)"
        )
        raise PlanError(f"wait-ready: {url}: {why}") from None
    if u.scheme != "http" or not host:
        raise PlanError(f"wait-ready: {url} is not an http:// URL")
    if port is not None and not 1 <= port <= 65535:
        raise PlanError(f"wait-ready: {url}: its port is not from 1 to 65535")
    return u, host, port


def shown_url(raw: str) -> str:
    """`raw` as an error may show it, read as text (it may not parse): its credentials
    (``http://user:KEY@host/``) and its query (``?key=KEY``) hidden, the rest escaped. Neither
    is needed to name the URL, and either may hold a key."""
    head, sep, _ = raw.partition("?")
    head = head.partition("#")[0]
    scheme, slashes, rest = head.partition("://")
    if slashes:
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            authority = "<redacted>@" + authority.rpartition("@")[2]
        head = f"{scheme}://{authority}{slash}{path}"
    return shown(head + ("?<redacted>" if sep else ""))
