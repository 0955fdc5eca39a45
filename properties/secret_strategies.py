"""Strategies for API keys and the free text (log lines) that may quote them (issue 14), and
the free-text redaction rule written plainly, to check the compiled one against.

Keys are what a caller could really set: printable text of one character or more, with no
comma (llama-server splits a key list at commas; the planner refuses one), no NUL and no
whitespace. Short keys are drawn often, from the characters that the rest of the output holds
too (``1`` of ``127.0.0.1``, ``k`` of ``q4_k_m``, ``-`` and ``=`` of every flag), since those
are the ones a substring search would over-redact and a careless rule would leak.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

from exedra_engine._core.secrets import REDACTED, SHORT_KEY
from exedra_engine._core.secrets.table import LOG_PATTERNS, PREFIXED, URL_USERINFO

_PRINTABLE = st.characters(
    codec="utf-8",
    exclude_categories=("Cc", "Cs", "Cf", "Co", "Cn", "Zs", "Zl", "Zp"),
    exclude_characters=",",
)
_COMMON = "abkmqAZ019_-.=:/@+\"'$\\<>é€"


def _is_key(k: str) -> bool:
    return bool(k) and k.isprintable() and "," not in k and not any(c.isspace() for c in k)


keys = st.one_of(
    st.text(st.sampled_from(_COMMON), min_size=1, max_size=3),
    st.text(_PRINTABLE, min_size=1, max_size=14),
    st.sampled_from(["1", "k", "0", "-", "=", "m", "127.0.0.1", "8080", "llama", "<redacted>"]),
).filter(_is_key)
"""One API key: as short as one character, any printable text but comma and whitespace."""

# Where a log line may quote a key: as its own token, or glued inside a word.
_AS_TOKEN = ("Bearer {k}", "key={k}", '"{k}"', "api_key: {k}", "({k})", "{k}")
_IN_A_WORD = ("q4_{k}_m.gguf", "x{k}", "{k}9", "{k}{k}")
_FILLER = st.text(st.sampled_from("abkqxAZ0189_-./:=\"'() "), max_size=10)


@st.composite
def log_lines(draw: st.DrawFn, secrets: list[str]) -> str:
    """One log line (no newline) made of filler and the `secrets`, in both kinds of place."""
    parts = draw(
        st.lists(
            st.one_of(
                _FILLER,
                st.builds(
                    str.format,
                    st.sampled_from(_AS_TOKEN + _IN_A_WORD),
                    k=st.sampled_from(secrets),
                ),
            ),
            max_size=8,
        )
    )
    return " ".join(parts)


_WORD = re.compile("[A-Za-z0-9_]")


def stands_as_token(text: str, at: int, key: str) -> bool:
    """Whether `key`, found at `at` in `text`, stands as a token there: neither neighbour a
    letter, digit or ``_``."""
    before = text[at - 1] if at > 0 else ""
    after = text[at + len(key) : at + len(key) + 1]
    return not _WORD.fullmatch(before) and not _WORD.fullmatch(after)


def reference_redact(text: str, secrets: list[str]) -> str:
    """The rule of `exedra_engine._core.secrets` for free text, written plainly, with no
    regular expression: at each place, the longest secret that starts there and is long
    (`SHORT_KEY` or more) or stands as a token in `text` is replaced; else the character
    is kept."""
    ordered = sorted({k for k in secrets if k}, key=len, reverse=True)
    out, pos = [], 0
    while pos < len(text):
        for key in ordered:
            if text.startswith(key, pos) and (
                len(key) >= SHORT_KEY or stands_as_token(text, pos, key)
            ):
                out.append(REDACTED)
                pos += len(key)
                break
        else:
            out.append(text[pos])
            pos += 1
    return by_look("".join(out))


def by_look(text: str) -> str:
    """What is secret by its look, from the walker's table, hidden in `text`."""
    for p in LOG_PATTERNS:
        text = re.sub(p.pattern.decode(), rf"\1{REDACTED}", text)
    text = PREFIXED.sub(REDACTED, text)
    return URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


# -- key shapes (issue 30): what real keys look like, each drawn whole ----------------------

_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_DIGIT = "0123456789"
_ALNUM = _UPPER + _LOWER + _DIGIT


def _chars(alphabet: str, n: int, most: int | None = None) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=n, max_size=most or n)


def _mixed(alphabet: str, n: int) -> st.SearchStrategy[str]:
    # A random run: one upper, one lower and one digit at least, as a generated key has.
    return st.builds(
        lambda a, b, c, rest: a + b + c + rest,
        _chars(_UPPER, 1),
        _chars(_LOWER, 1),
        _chars(_DIGIT, 1),
        _chars(alphabet, n - 3),
    )


def _b64url(n: int, most: int) -> st.SearchStrategy[str]:
    return _chars(_ALNUM + "-_", n, most)


KEY_SHAPES = {
    "openai": st.builds(
        "sk-{}{}".format, st.sampled_from(["", "proj-", "live-"]), _mixed(_ALNUM, 24)
    ),
    "aws-id": st.builds(
        "{}{}".format, st.sampled_from(["AKIA", "ASIA"]), _chars(_UPPER + _DIGIT, 16)
    ),
    "aws-secret": _mixed(_ALNUM + "+/", 40).filter(lambda k: k[0] != "/"),
    "jwt": st.builds("eyJ{}.eyJ{}.{}".format, _b64url(8, 30), _b64url(8, 40), _b64url(10, 43)),
    "github": st.builds("{}_{}".format, st.sampled_from(["ghp", "gho", "ghs"]), _mixed(_ALNUM, 36)),
    "github-pat": st.builds("github_pat_{}_{}".format, _mixed(_ALNUM, 22), _mixed(_ALNUM, 59)),
    "huggingface": st.builds("hf_{}".format, _mixed(_ALNUM, 34)),
    "slack": st.builds(
        "xox{}-{}-{}".format, st.sampled_from("bpas"), _chars(_DIGIT, 12), _mixed(_ALNUM, 24)
    ),
    "hex": _chars("0123456789abcdef", 40).filter(
        lambda k: any(c.isdigit() for c in k) and any(c.isalpha() for c in k)
    ),
    "base64": st.builds("{}=".format, _mixed(_ALNUM + "+/", 43)).filter(lambda k: k[0] != "/"),
    # An HTTP credential of no shape of its own (``Tr0ub4dor-and-3``): a secret only where
    # something marks it (a key flag, a secret name, ``Bearer`` before it).
    "http-token": _mixed(_ALNUM + "-._~", 15).filter(lambda k: k[0] not in "-._~"),
}
"""One generator per key shape the walker's table knows (`exedra_engine._core.secrets.table`)."""

PREFIX_SHAPES = frozenset(
    {"openai", "aws-id", "jwt", "github", "github-pat", "huggingface", "slack"}
)
"""Shapes known by their prefix wherever they stand; the others are known as a whole value
(``http-token``: only where a route marks it)."""

SHAPED_ALONE = sorted(set(KEY_SHAPES) - {"http-token"})
"""The shapes the table knows by themselves, wherever the key is typed."""

key_shapes = st.sampled_from(SHAPED_ALONE).flatmap(
    lambda name: KEY_SHAPES[name].map(lambda k: (name, k))
)
"""(shape name, key): one real-looking key of any shape the table knows by itself."""

routed_key_shapes = st.sampled_from(sorted(KEY_SHAPES)).flatmap(
    lambda name: KEY_SHAPES[name].map(lambda k: (name, k))
)
"""(shape name, key): `key_shapes`, and an HTTP token known only by what marks it."""


def leaked(key: str, text: str) -> bool:
    """Whether `text` shows `key`, whole or a piece of 12 characters or more (one half of a
    key cut in two)."""
    if key in text:
        return True
    return any(key[i : i + 12] in text for i in range(0, max(len(key) - 11, 0)))
