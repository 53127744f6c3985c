"""The CLI's reads of a worker's HTTP API (``lockstep diagnose``, ``capacity``, ``fabric``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get_json(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """GET ``url`` as JSON; raises ``LookupError`` with the API's own message on an HTTP error."""
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise LookupError(f"{exc.code}: {message}") from None
