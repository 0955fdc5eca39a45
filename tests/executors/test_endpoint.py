"""Endpoint resolution, as the executors read argv and env (checked against the real ones)."""

from __future__ import annotations

import pytest
from returns.result import Failure

from exedra_engine import Kind, NoEndpoint, PlanError, resolve_endpoint
from exedra_engine._core.plan.endpoint import stoi

L, W = Kind.LLAMA, Kind.TRANSCRIBE


def ok(kind: Kind, args: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return resolve_endpoint(kind, args, env or {}).unwrap()


def fail(kind: Kind, args: list[str], env: dict[str, str] | None = None) -> Exception:
    r = resolve_endpoint(kind, args, env or {})
    assert isinstance(r, Failure), r
    return r.failure()


def test_flag_beats_env_and_last_repeat_wins() -> None:
    r = ok(
        L,
        ["--port", "9001", "--host", "10.0.0.1", "--port", "9002"],
        {"LLAMA_ARG_PORT": "8000", "LLAMA_ARG_HOST": "0.0.0.0"},
    )
    assert (r.host, r.port) == ("10.0.0.1", 9002)


def test_env_alone_sets_the_endpoint() -> None:
    r = ok(L, [], {"LLAMA_ARG_PORT": "8095", "LLAMA_ARG_HOST": "::1"})
    assert (r.host, r.port, r.url) == ("::1", 8095, "http://[::1]:8095")


def test_host_defaults_to_loopback_and_port_must_be_named() -> None:
    assert ok(L, ["--port", "1234"]).host == "127.0.0.1"
    e = fail(L, ["--host", "0.0.0.0"])
    assert isinstance(e, NoEndpoint) and "--port or LLAMA_ARG_PORT" in str(e)
    assert isinstance(fail(W, []), NoEndpoint)


def test_wildcards_are_reached_on_loopback() -> None:
    assert ok(L, ["--host", "0.0.0.0", "--port", "80"]).url == "http://127.0.0.1:80"
    assert ok(W, ["--host", "::", "--port", "80"]).url == "http://[::1]:80"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8092abc", 8092),
        (" 8096", 8096),
        ("+7", 7),
        ("-1", -1),
        ("abc", None),
        ("", None),
        ("99999999999", None),
        ("\t42x", 42),
    ],
)
def test_ports_parse_like_std_stoi(text: str, value: int | None) -> None:
    assert stoi(text) == value


def test_unparseable_env_port_is_fatal_even_with_a_flag() -> None:
    e = fail(L, ["--port", "9000"], {"LLAMA_ARG_PORT": "abc"})
    assert isinstance(e, PlanError) and "LLAMA_ARG_PORT" in str(e)


@pytest.mark.parametrize("port", ["0", "-1", "70000"])
def test_ports_outside_the_tcp_range(port: str) -> None:
    assert isinstance(fail(L, ["--port", port]), PlanError)


def test_flag_equals_value_is_refused_like_the_executor() -> None:
    e = fail(L, ["--port=9000"])
    assert "does not accept --port=..." in str(e)


def test_api_keys_accumulate_env_first() -> None:
    r = ok(L, ["--port", "1", "--api-key", "kc", "--api-key", "kd,ke"], {"LLAMA_API_KEY": "ka,kb"})
    assert r.api_keys == ("ka", "kb", "kc", "kd", "ke")
    assert r.api_key == "ka"
    assert ok(L, ["--port", "1"]).api_key == ""


def test_whisper_reads_no_environment() -> None:
    r = ok(W, ["--port", "8080"], {"LLAMA_ARG_PORT": "1", "LLAMA_API_KEY": "k"})
    assert (r.port, r.api_keys) == (8080, ())


def test_values_are_not_mistaken_for_flags() -> None:
    # "--port" as the value of --alias is a value, not a flag.
    assert ok(L, ["--alias", "--port", "--port", "7"]).port == 7


def test_unix_sockets_are_refused() -> None:
    assert isinstance(fail(L, ["--host", "/run/llama.sock", "--port", "1"]), NoEndpoint)


def test_missing_value_at_the_end() -> None:
    assert "needs a value" in str(fail(L, ["--port", "1", "--host"]))


def test_env_as_key_value_strings() -> None:
    r = resolve_endpoint(L, [], ("LLAMA_ARG_PORT=1", "LLAMA_ARG_PORT=2", "junk")).unwrap()
    assert r.port == 2
