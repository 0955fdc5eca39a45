"""The one base of every value the library passes around.

Frozen (a changed copy is `msgspec.structs.replace`), keyword-only, and strict when decoded:
an edited plan JSON with a misspelt field is an error naming it, not a field silently dropped.
"""

from __future__ import annotations

import msgspec


class Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the library's immutable values."""
