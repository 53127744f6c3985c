"""Redaction (lockstep/delivery/redaction.py): every part of a secret, in every encoding, and nothing else.

One secret URL with every part a URL can hide a secret in::

    https://bot-user:pa55-w0rd@hooks.example.com/services/T08ZK3L7QHF/B08ZK3MN2PA/Xk7pQ2vR9sL4mN8wZ1cY6tB3
          ?token=tok_9f8e7d6c5b4a&sig=AbCdEfGh%2BIjKl%3D&format=json#frag-7e6d5c4b
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest

from lockstep.delivery.redaction import (
    MASK,
    Redactor,
    answer_reason,
    describe_answer,
    secret_parts,
    token_like,
)

URL = ("https://bot-user:pa55-w0rd@hooks.example.com/services/T08ZK3L7QHF/B08ZK3MN2PA/Xk7pQ2vR9sL4mN8wZ1cY6tB3"
       "?token=tok_9f8e7d6c5b4a&sig=AbCdEfGh%2BIjKl%3D&format=json#frag-7e6d5c4b")
PATH = "/services/T08ZK3L7QHF/B08ZK3MN2PA/Xk7pQ2vR9sL4mN8wZ1cY6tB3"
RED = Redactor([URL])


def _json(text: str) -> str:
    return json.dumps(text)[1:-1]


# (what, the part of the secret) - each must be masked on its own
PARTS = [
    ("whole URL", URL),
    ("path", PATH),
    ("path and query", PATH + "?token=tok_9f8e7d6c5b4a&sig=AbCdEfGh%2BIjKl%3D&format=json"),
    ("path segment: workspace id", "T08ZK3L7QHF"),
    ("path segment: channel id", "B08ZK3MN2PA"),
    ("path segment: token", "Xk7pQ2vR9sL4mN8wZ1cY6tB3"),
    ("userinfo", "bot-user:pa55-w0rd"),
    ("password", "pa55-w0rd"),
    ("query", "token=tok_9f8e7d6c5b4a&sig=AbCdEfGh%2BIjKl%3D&format=json"),
    ("query value", "tok_9f8e7d6c5b4a"),
    ("query value, as written (encoded)", "AbCdEfGh%2BIjKl%3D"),
    ("query value, decoded", "AbCdEfGh+IjKl="),
    ("fragment", "frag-7e6d5c4b"),
]

# (encoding, function) - each part in each of these
ENCODINGS = [
    ("plain", lambda s: s),
    ("percent-encoded", lambda s: quote(s, safe="")),
    ("percent-encoded, lower-case hex", lambda s: quote(s, safe="").lower() if "%" in quote(s, safe="") else s),
    ("percent-encoded keeping / and :", lambda s: quote(s, safe="/:")),
    ("form-encoded", quote_plus),
    ("percent-encoded twice", lambda s: quote(quote(s, safe=""), safe="")),
    ("JSON string", _json),
    ("JSON string, escaped slashes", lambda s: _json(s).replace("/", "\\/")),
    ("JSON of percent-encoded", lambda s: _json(quote(s, safe=""))),
]


@pytest.mark.parametrize("enc_name, encode", ENCODINGS, ids=[e[0] for e in ENCODINGS])
@pytest.mark.parametrize("part_name, part", PARTS, ids=[p[0] for p in PARTS])
def test_every_part_in_every_encoding_is_masked(part_name: str, part: str, enc_name: str, encode) -> None:
    form = encode(part)
    text = f"HTTP 500 for POST {form} (retry later)"
    out = RED.text(text)
    assert MASK in out, (part_name, enc_name, out)
    for secret_bit in ("T08ZK3L7QHF", "B08ZK3MN2PA", "Xk7pQ2vR9sL4mN8wZ1cY6tB3", "pa55-w0rd", "tok_9f8e7d6c5b4a",
                       "IjKl", "7e6d5c4b"):
        assert secret_bit not in out, (part_name, enc_name, out)
    assert out.startswith("HTTP 500 for POST ") and out.endswith(" (retry later)")


@pytest.mark.parametrize("public", [
    "hooks.example.com", "https://hooks.example.com/", "services", "format=json", "json", "bot-user",
    "lockstep deliver: slack: HTTP 429 Too Many Requests",
])
def test_what_is_not_secret_is_kept(public: str) -> None:
    """The host, plain words of the path, short or ordinary query values: masking them would only blind the logs."""
    assert RED.text(public) == public


@pytest.mark.parametrize(("part", "expected"), [
    ("services", False), ("hooks", False), ("v2", False), ("enqueue", False), ("api", False),
    ("T08ZK3L7QHF", True), ("B0LOCK", True), ("XkpQvRsLm", True), ("abcdefghijklmnopq", True), ("hunter2x", True),
])
def test_token_like(part: str, expected: bool) -> None:
    assert token_like(part) is expected


def test_non_url_secrets_keep_their_whole_value_and_short_values_are_ignored() -> None:
    assert secret_parts("a1b2c3d4e5f60718293a4b5c6d7e8f90") == {"a1b2c3d4e5f60718293a4b5c6d7e8f90"}
    assert Redactor(["abc"]).text("abc abc") == "abc abc"
    r = Redactor(["xoxb-1234-5678-AbCdEf"])
    assert r.text('{"auth": "Bearer xoxb-1234-5678-AbCdEf"}') == '{"auth": "Bearer [REDACTED]"}'


def test_records_are_masked_deeply_keys_included() -> None:
    rec = {"last_error": f"slack: {quote(PATH, safe='')}", PATH: [{"x": URL}], "n": 3}
    assert RED.record(rec) == {"last_error": f"slack: {MASK}", MASK: [{"x": MASK}], "n": 3}


@pytest.mark.parametrize(("body", "reason"), [
    (b"invalid_blocks", "invalid_blocks"),                                     # Slack's answer: kept
    (b'{"status": "invalid event", "message": "Event object is invalid", "errors": ["\'routing_key\' is bad"]}',
     "Event object is invalid: invalid event: 'routing_key' is bad"),
    (b"500 for POST /services/T0/B0/x body: {}", "500 for POST […] body: {}"),    # paths are elided
    (f"500 for POST {PATH} body: {{...}}".encode(), ""),                      # a long echo is not a reason
    (b"token b1b2c3d4e5f60718293a4b5c6d7e8f90 refused", "token […] refused"),   # unknown long ids too
    (b"<html>" + b"x" * 500 + b"</html>", ""),                                 # a page is not a reason
    ("bidi \u202e and \x1b[31m escapes".encode(), "bidi and [31m escapes"),
    (b'{"message": "' + b"too many " * 50 + b'"}', ("too many " * 18)[:159] + "…"),
])
def test_a_receivers_answer_leaves_only_a_short_sanitised_reason(body: bytes, reason: str) -> None:
    assert answer_reason(body, RED) == reason


def test_describe_answer_keeps_status_reason_size_and_hash_never_the_body() -> None:
    body = f'{{"error": "no such hook", "url": "{URL}"}}'.encode()
    text = describe_answer(404, body, RED)
    assert text.startswith("HTTP 404 Not Found: no such hook (body ") and f"{len(body)} B" in text
    assert "Xk7p" not in text and "hooks.example.com" not in text
    assert describe_answer(503, b"", RED).startswith("HTTP 503 Service Unavailable (body 0 B, sha256 ")
