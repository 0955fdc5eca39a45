"""``wait-ready URL`` validates its URL: a port out of range, a broken IPv6 host or a port
that is no number exit 2 with one line (no traceback), and neither credentials nor a query
string (where a key may travel) is echoed."""

from __future__ import annotations

import pytest

from exedra_engine.cli.wait_ready import shown_url
from tests.conftest import Run

KEY = "sk-live-abcdef123456"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:99999/health", "its port is not from 1 to 65535"),
        ("http://127.0.0.1:0/health", "its port is not from 1 to 65535"),
        ("http://[::1/x", "its host cannot be read"),
        ("http://h:abc/", "its port is not a number"),
        ("ftp://h/", "is not an http:// URL"),
        ("http:///health", "is not an http:// URL"),
    ],
)
def test_wait_ready_refuses_a_url_it_cannot_ask_with_one_line(
    run: Run, url: str, said: str
) -> None:
    r = run("wait-ready", "--timeout", "0.1", url)
    assert r.code == 2
    (line,) = r.err.splitlines()
    assert said in line and "Traceback" not in r.err


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:1/health?key={KEY}",
        f"http://127.0.0.1:1/health?api_key={KEY}#frag",
        f"http://u:{KEY}@127.0.0.1:1/health",
        f"http://127.0.0.1:99999/health?key={KEY}",
        f"http://[::1/x?key={KEY}",
    ],
)
def test_wait_ready_never_echoes_a_key_in_the_query_or_credentials(run: Run, url: str) -> None:
    r = run("wait-ready", "--timeout", "0.2", "--interval", "0.1", url)
    assert r.code in (1, 2)
    assert KEY not in r.out + r.err
    assert "<redacted>" in r.err


def test_shown_url_keeps_what_names_the_url() -> None:
    assert shown_url("http://h:8080/health") == "http://h:8080/health"
    assert shown_url(f"http://a:{KEY}@h:8080/p?x={KEY}") == "http://<redacted>@h:8080/p?<redacted>"
    assert shown_url("http://h/\x1b[2J") == "http://h/\\x1b[2J"
