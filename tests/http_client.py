"""The tests' one small HTTP client for a launched executor (JSON in, JSON out)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def http(url: str, body: dict[str, Any] | None = None, key: str = "") -> tuple[int, Any]:
    """POST `body` (GET without one) and return the status and the decoded answer (None for
    an HTTP error's body)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None


def health(url: str) -> int:
    """/health's status, 0 while nothing listens."""
    try:
        return http(url + "/health")[0]
    except OSError:
        return 0
