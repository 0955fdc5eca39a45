"""The table that decides what is secret: every rule of the secret walker as data. Pure.

One place, read by every output (h11's ``READERS``: one table picks the reader). A rule
added here is applied by plan rendering, ``--explain``, the reprs, the log relay, the emit
guard and the CLI's error echo alike (`exedra_engine._core.secrets`).

- **Flags** (`FLAG_DISTANCE`): an executor profile's ``secret_flags``, and any flag whose
  name, with case, ``-`` and ``_`` ignored, is within `FLAG_DISTANCE` edits of one of them
  (``--api-kee``, ``--apikey=``, ``--hf_token``, ``--API-KEY``). A flag the executor's
  table knows is never a neighbour: ``--api-key-file`` takes a path.
- **Variable names** (`SECRET_WORDS`): a name is cut into words at ``_``, ``-``, ``.`` and
  lower-to-upper case changes; it is secret when a word is one of `SECRET_WORDS`, or ends
  in one of `SECRET_ENDINGS` (``APIKEY``, ``HFTOKEN``, ``DBPASSWORD``, ``OAUTH``). Whole
  words, so ``KEYBOARD``, ``PATH``, ``PASSTHROUGH``, ``MAX_TOKENS`` and ``AUTHOR`` are not.
  ``PWD`` is a password word (``MYSQL_PWD``, ``DB_PWD``) except as the whole name ``PWD`` or
  ``OLDPWD``, the shell's working directories (`NOT_SECRET_NAMES`).
- **URLs** (`URL_USERINFO`, `URL_QUERY`): the userinfo of any ``scheme://user:pw@host``
  (``http://alice:pw@proxy``, ``https://TOKEN@host``), and the value of a query parameter
  whose name is a secret name or one of `SECRET_PARAMS` (``?key=``, ``token=``,
  ``api_key=``, ``sig=``).
- **Key shapes** (`PREFIXED_SHAPES`, anywhere in a value; `WHOLE_SHAPES`, only as a whole
  value, since a model path may hold a commit hash): OpenAI-style ``sk-``, AWS ``AKIA``/
  ``ASIA`` ids and 40-character secrets, JWTs, GitHub ``ghp_``/``github_pat_``, Hugging
  Face ``hf_``, Slack ``xox?-``, GitLab ``glpat-``, the token of an HTTP ``Bearer`` or
  ``Basic`` credential (`HTTP_CREDENTIAL`), long base64 and hex runs.
- **Log lines** (`LOG_PATTERNS`): what an executor prints about a key it was handed without
  printing the key (llama-server's ``api_keys: ****tuff``, its last 4 characters).

How far a found secret is hidden: every occurrence of a value of `SHORT_KEY` characters or
more, inside any longer token too (``--alias m-K``, ``Bearer K``, ``http://u:K@h/``); a
shorter one where it stands (a whole value, an item of a comma list, a token of free text),
since a one-character key ``1`` would otherwise hide the ``1`` of ``127.0.0.1``.
"""

from __future__ import annotations

import re
from typing import Final

REDACTED: Final = "<redacted>"
"""What stands where a secret stood."""

SHORT_KEY: Final = 8
"""Secrets shorter than this are hidden only where they stand, not inside longer text."""

FLAG_DISTANCE: Final = 1
"""Edits (insert, delete, replace, swap two neighbours) that make a flag a mistyped
neighbour of a secret flag, for names of `FLAG_MIN_NAME` characters or more."""
FLAG_MIN_NAME: Final = 5
"""A shorter secret flag (``-hft``) has only its exact spellings as neighbours: one edit
of a three-letter name reaches too many real flags."""

SECRET_WORDS: Final = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "PWD",
        "AUTH",
        "AUTHORIZATION",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "PRIVATE",
        "COOKIE",
        "SIGNATURE",
    }
)
"""Words of a variable's name that make its value a secret. ``CERT`` is not one: a
certificate is public, and its path is what a ``*_CERT`` variable holds."""

SECRET_ENDINGS: Final = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "AUTH",
    "CREDENTIALS",
    "CREDENTIAL",
)
"""A word ending so is secret too (``APIKEY``, ``HFTOKEN``, ``OAUTH``), except the words of
`NOT_SECRET_WORDS`."""

NOT_SECRET_WORDS: Final = frozenset({"MONKEY", "TURKEY", "HOCKEY", "JOCKEY", "DONKEY"})
"""Words that end in a secret word by accident."""

NOT_SECRET_NAMES: Final = frozenset({"PWD", "OLDPWD"})
"""Whole names that are not secrets though a word says so: the shell's working directory."""

SECRET_PARAMS: Final = frozenset(
    {"key", "apikey", "api_key", "token", "access_token", "sig", "signature", "password"}
)
"""Query parameters whose value is a secret, beside any whose name is a secret name."""

URL_USERINFO: Final = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<info>[^/@\s?#]{1,512})@"
)
"""The userinfo of a URL (``user:pw`` of ``http://user:pw@host``): hidden whole, since a
token often stands there alone (``https://TOKEN@github.com``). Bounded, so that a log line
of 64 KiB of letters costs one pass, not one per letter."""

URL_QUERY: Final = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.-]{1,64})=(?P<value>[^&;#\s]+)")
"""One ``name=value`` of a query string."""

PREFIXED_SHAPES: Final = (
    ("OpenAI-style key", r"sk-[A-Za-z0-9_-]{12,}"),
    ("AWS access key id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    ("JWT", r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    ("GitHub token", r"gh[pousr]_[A-Za-z0-9]{20,}"),
    ("GitHub fine-grained token", r"github_pat_[A-Za-z0-9_]{20,}"),
    ("Hugging Face token", r"hf_[A-Za-z0-9]{20,}"),
    ("Slack token", r"xox[abeoprs]-[A-Za-z0-9-]{10,}"),
    ("GitLab token", r"glpat-[A-Za-z0-9_-]{16,}"),
)
"""Key shapes found anywhere in a value or a line: their prefixes make a mistake unlikely."""

_NOT_A_WORD = r"(?![A-Z]?[a-z]+(?![A-Za-z0-9._~+/=-]))"
HTTP_CREDENTIAL: Final = re.compile(
    rf"(?P<scheme>[Bb](?:earer|asic) ){_NOT_A_WORD}(?P<token>[A-Za-z0-9._~+/-]{{8,}}=*)"
)
"""An HTTP credential after its scheme (``Authorization: Bearer T``, ``Basic dXNlcjpw``),
found anywhere in a value or a line: the token is the secret, 8 characters or more and not
a word of letters alone (``Bearer authentication``, ``Basic Usage`` are prose). Its own
pattern, not a branch of `PREFIXED`, so that it starts with a letter the regular expression
engine looks for first: a log line without one costs ~1 us more, not ~10 us."""

WHOLE_SHAPES: Final = (
    ("AWS secret access key", r"[A-Za-z0-9+/]{40}"),
    ("base64 run", r"[A-Za-z0-9+/]{32,}={0,2}"),
    ("base64url run", r"[A-Za-z0-9_-]{32,}"),
    ("hex run", r"[0-9A-Fa-f]{32,}"),
)
"""Key shapes that are secret only as a whole value (a variable's, a flag's, an operand):
a hex run inside a path is a commit hash (a Hugging Face cache), not a key. A run must
also look random (`looks_random`): a file name of words is not a key."""

LOG_PATTERNS: Final = (
    # llama-server logs the last 4 characters of its last key: "api_keys: ****tuff".
    re.compile(rb"(api_keys?: )\*+[^\s]{0,8}"),
    # A request's header quoted in a line: the scheme kept, its token hidden.
    re.compile(HTTP_CREDENTIAL.pattern.encode()),
)
"""Lines an executor prints about a key it was handed (or a header it was sent); the key's
part after the group."""


def looks_random(run: str) -> bool:
    """Whether a run of key characters looks like a key rather than words or a path: it
    does not start with ``/``, and a piece of it between ``-`` and ``_`` of 16
    characters or more mixes digits with letters and, unless it is hex, upper with lower
    case (``DeepSeek-R1-Distill-Qwen-1_5B`` is words; ``wJalrXUtnFEMI/K7MDENG/bPxRfi...`` is
    not)."""
    if run[:1] == "/":
        return False
    return any(_random_piece(p) for p in re.split(r"[-_]", run) if len(p) >= 16)


def _random_piece(piece: str) -> bool:
    digits = any(c.isdigit() for c in piece)
    upper = any(c.isupper() for c in piece)
    lower = any(c.islower() for c in piece)
    if re.fullmatch(r"[0-9A-Fa-f]+", piece):
        return digits and (upper or lower)
    return digits and upper and lower


PREFIXED: Final = re.compile("|".join(rf"(?<![A-Za-z0-9])(?:{p})" for _, p in PREFIXED_SHAPES))
WHOLE: Final = tuple(re.compile(p) for _, p in WHOLE_SHAPES)
