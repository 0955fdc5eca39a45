"""``exedra-engine wait-ready URL``: wait until the executor answers 200, the readiness step
of an emitted systemd unit (its ExecStartPost)."""

from __future__ import annotations

import argparse
import sys
import time

from exedra_engine.cli import options
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import PROG, shown
from exedra_engine.errors import PlanError


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
    import urllib.parse

    u = urllib.parse.urlsplit(a.url)
    # Credentials in the URL (http://user:KEY@host/) are never echoed: they are not sent
    # either, the ready path needs no key.
    url = a.url
    if "@" in u.netloc:
        url = urllib.parse.urlunsplit(
            u._replace(netloc="<redacted>@" + u.netloc.rpartition("@")[2])
        )
    if u.scheme != "http" or not u.hostname:
        raise PlanError(f"wait-ready: {url!r} is not an http:// URL")
    start = time.monotonic()
    deadline = start + a.timeout
    last, attempts = "no answer", 0
    while True:
        # One attempt never runs past the deadline: the timeout is what is waited, no more.
        remaining = deadline - time.monotonic()
        conn = http.client.HTTPConnection(
            u.hostname, u.port or 80, timeout=min(5.0, max(remaining, 0.1))
        )
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
                f"{shown(url)} did not answer 200 in {waited:.1f} s ({attempts} attempt"
                f"{'s' * (attempts != 1)}, --timeout {a.timeout:g}; last: {shown(last)})"
            )
            print(f"{PROG}: error: {said}", file=sys.stderr)
            return 1
        # The last attempt is made at the deadline, not an interval before it.
        time.sleep(min(a.interval, remaining))
