"""Random argument vectors to `exedra-engine plan`: exit 0 with a plan, or exit 2 with a
one-line message; never a traceback (issue 5, hostile command lines)."""

from __future__ import annotations

import contextlib
import io
import itertools
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from exedra_engine import LaunchPlan
from exedra_engine.cli import main

OPTIONS = [
    "--model",
    "--kind",
    "--id",
    "--config",
    "--ctx",
    "--threads",
    "--port",
    "--host",
    "--no-gpu",
    "--ui",
    "--api-key-env",
    "--arg",
    "--env",
    "--json",
    "--explain",
    "--port-base",
    "--capability",
    "--run-arg",
    "--executor",
    "--no-config",
    "--show-secrets",
    "-h",
]
tokens = st.one_of(
    st.sampled_from(OPTIONS),
    st.sampled_from(["llama", "transcribe", "x", "0", "-1", "99999", "A=B", "=", "--"]),
    st.text(max_size=12),
)


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@given(st.lists(tokens, max_size=10))
def test_random_argv(argv: list[str]) -> None:
    code, out, err = run(["plan", *argv])
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("exedra-engine")
    else:
        assert out.strip()


@given(st.lists(tokens, max_size=6), st.sampled_from(["llama", "transcribe"]))
def test_random_argv_around_a_valid_request(argv: list[str], kind: str) -> None:
    base = [
        "plan",
        "--model",
        "/nonexistent/m.gguf",
        "--kind",
        kind,
        "--no-config",
        "--executor",
        "/usr/bin/true",
        "--json",
    ]
    full = [*base, *argv]
    code, out, err = run(full)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 0 and "-h" not in argv and "--explain" not in argv:
        plan: Any = msgspec.json.decode(out, type=LaunchPlan)
        # The last --executor given wins, as argparse reads it.
        executors = [t for prev, t in itertools.pairwise(full) if prev == "--executor"]
        assert plan.command == executors[-1]
    elif code == 2:
        assert err.count("\n") == 1
