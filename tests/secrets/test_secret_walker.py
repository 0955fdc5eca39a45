"""The secret walker's table, rule by rule: what is secret and what is not, with no process,
file or port (`exedra_engine._core.secrets`)."""

from __future__ import annotations

import pytest

from exedra_engine._core.launch.logs import MAX_LINE, LogLines
from exedra_engine._core.secrets import (
    REDACTED,
    Hider,
    TextRedactor,
    is_secret_flag,
    is_secret_name,
    looks_secret,
    plan_secrets,
    redact_args,
    secret_copies,
)

K = "sk-live-abcdef123456"


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASS",
        "MYSQL_PWD",
        "BASIC_AUTH",
        "OAUTH",
        "HF_TOKEN",
        "LLAMA_API_KEY",
        "apiKey",
        "GITHUB_APIKEY",
        "SMTP_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE",
        "SESSION_COOKIE",
    ],
)
def test_password_and_auth_words_make_a_secret_name(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["PATH", "PWD", "OLDPWD", "KEYBOARD", "MAX_TOKENS", "AUTHOR", "PASSTHROUGH", "TLS_CERT"],
)
def test_words_that_only_contain_a_secret_word_are_not_secret_names(name: str) -> None:
    # PWD alone is the shell's working directory; a certificate is public.
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "flag", ["--api-kee", "--apikey", "--hf_token", "--API-KEY", "--api_key", "--hf-tokne", "-hft"]
)
def test_mistyped_neighbours_of_key_flags_take_a_secret(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize("flag", ["--api-key-file", "--alias", "--hf-repo", "-hf", "--port"])
def test_real_flags_near_a_key_flag_are_not_secret(flag: str) -> None:
    # A flag the executor's table knows is never a neighbour: --api-key-file takes a path.
    assert not is_secret_flag(flag)


@pytest.mark.parametrize(
    "value",
    [
        K,
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "hf_abcdefghijklmnopqrstuvwxyzABCD",
        "xoxb-123456789012-abcdefghij",
        "http://alice:pw@proxy:3128",
        "https://h/v1?api_key=abc&x=1",
        "0123456789abcdef0123456789abcdef",
        "q8Zr1T0pXvB2nLm4Ks9dWc7Hy3Ja6Ue5",
        "Bearer Tr0ub4dor-and-3",
        "Authorization: bearer abcdefgh1234",
        "Basic dXNlcjpwYXNzd29yZA==",
    ],
)
def test_key_shapes_and_url_credentials_look_secret(value: str) -> None:
    assert looks_secret(value)


@pytest.mark.parametrize(
    "value",
    [
        "/models/DeepSeek-R1-Distill-Qwen-1_5B-Q4_K_M.gguf",
        "DeepSeek-R1-Distill-Qwen-1_5B-Q4_K_M",
        "/root/.cache/huggingface/hub/models--a--b/snapshots/"
        "0123456789abcdef0123456789abcdef01234567/m.gguf",
        "127.0.0.1",
        "http://127.0.0.1:8080/health",
        "gemma-3-270m-it-q4_k_m.gguf",
        "http://h/x?lang=en",
        "Bearer authentication is required",
        "Basic Usage",
        "Bearer abc",
    ],
)
def test_paths_names_and_plain_urls_do_not_look_secret(value: str) -> None:
    assert not looks_secret(value)


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("UPSTREAM_HEADER=Bearer Tr0ub4dor-and-3", "Tr0ub4dor-and-3"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ],
)
def test_an_http_credential_is_a_plan_secret_and_only_its_token_is_hidden(
    value: str, token: str
) -> None:
    assert token in plan_secrets((), (f"X={value}",))
    assert Hider(plan_secrets((), (f"X={value}",))).value(value) == value.replace(token, REDACTED)


def test_a_log_line_quoting_an_http_credential_keeps_the_scheme_and_hides_the_token() -> None:
    line = b"proxy: Authorization: Bearer Tr0ub4dor-and-3; Bearer authentication is on"
    assert TextRedactor(()).bytes(line) == (
        b"proxy: Authorization: Bearer <redacted>; Bearer authentication is on"
    )
    assert TextRedactor(()).text("Basic dXNlcjpwYXNzd29yZA==") == "Basic <redacted>"


def test_a_long_key_is_hidden_inside_every_longer_value() -> None:
    hide = Hider([K])
    assert hide.token(f"m-{K}") == f"m-{REDACTED}"
    assert hide.env(f"UPSTREAM=Bearer {K}") == f"UPSTREAM=Bearer {REDACTED}"
    assert hide.env(f"CB=http://u:{K}@h/") == f"CB=http://{REDACTED}@h/"
    plain = "Zq9-long-key-value"  # no key shape: hidden because it is the key
    assert Hider([plain]).token(f"--alias=a,{plain}x") == f"--alias=a,{REDACTED}x"


def test_a_short_key_is_hidden_only_where_it_stands() -> None:
    # A one-character key hides no "1" of 127.0.0.1.
    hide = Hider(["1"])
    assert hide.value("1") == REDACTED and hide.value("a,1") == REDACTED
    assert hide.value("127.0.0.1") == "127.0.0.1"


def test_url_credentials_in_env_are_plan_secrets() -> None:
    secrets = plan_secrets((), ["HTTPS_PROXY=http://alice:pw@proxy"])
    assert "alice:pw" in secrets


def test_a_mistyped_key_flag_hides_its_value() -> None:
    assert redact_args(["--api-kee", K]) == ("--api-kee", REDACTED)
    assert redact_args([f"--apikey={K}"]) == (f"--apikey={REDACTED}",)
    assert redact_args(["--hf_token", K]) == ("--hf_token", REDACTED)


def test_copies_inside_longer_values_and_url_credentials_are_refused_by_emit() -> None:
    where = secret_copies(
        ["--alias", f"m-{K}"],
        [f"LLAMA_API_KEY={K}", "HTTPS_PROXY=http://alice:pw@proxy", "LANG=C"],
    )
    assert where == ("HTTPS_PROXY", "--alias")


def test_llama_servers_api_keys_line_is_hidden() -> None:
    # llama-server logs the last 4 characters of its last key.
    r = TextRedactor([])
    assert r.bytes(b"main: api_keys: ****tuff\n") == f"main: api_keys: {REDACTED}\n".encode()
    assert r.text("api_keys: ****tuff") == f"api_keys: {REDACTED}"


@pytest.mark.parametrize("split", range(1, len(K)))
def test_a_key_split_across_the_line_cut_is_hidden_whole(split: int) -> None:
    # The line passes the cap while the key is half written: the cut must not show a half.
    lines = LogLines([K])
    out = lines.feed(b"x" * (MAX_LINE + 1) + K[:split].encode())
    out += lines.feed(K[split:].encode() + b"y" * 50 + b"\n")
    text = b"".join(out)
    assert len(out) == 2 and text.count(b"\n") == 2  # the line was cut once
    assert K[:split].encode() not in text.replace(b"x", b"") or split < 4
    assert REDACTED.encode() in text
    for half in (K[: max(split, 4)], K[min(split, len(K) - 4) :]):
        assert half.encode() not in text
