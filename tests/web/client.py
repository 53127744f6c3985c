"""A tiny synchronous HTTP client for the tests (urllib: what any operator's script would use)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def request(base: str, path: str, *, method: str = "GET", body: Any = None, raw: bytes | None = None,
            headers: dict[str, str] | None = None, token: str | None = None) -> Reply:
    hdrs = {"Accept": "application/json", **(headers or {})}
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def get(base: str, path: str, **kw: Any) -> Reply:
    return request(base, path, **kw)
