from __future__ import annotations

import gzip
import logging

import orjson
import pytest

from ssetape.redactor import Redactor

KEY = b"k" * 32


def test_default_headers_are_masked_keeping_the_scheme() -> None:
    r = Redactor(KEY)
    out = dict(
        r.headers_list(
            [
                ("Authorization", "Bearer sk-abc"),
                ("x-api-key", "sk-ant-1"),
                ("Cookie", "a=b"),
                ("Content-Type", "application/json"),
            ]
        )
    )
    assert out["Authorization"].startswith("Bearer <redacted:")
    assert "sk-abc" not in out["Authorization"]
    assert out["x-api-key"].startswith("<redacted:") and out["Cookie"].startswith("<redacted:")
    assert out["Content-Type"] == "application/json"


def test_mask_is_stable_per_value_and_key() -> None:
    r = Redactor(KEY)
    assert r.mask("sk-1") == r.mask("sk-1") != r.mask("sk-2")
    assert Redactor(b"x" * 32).mask("sk-1") != r.mask("sk-1")
    # Redacting twice does not re-mask (exports of already-redacted rows stay the same).
    once = r.header_value("x-api-key", "sk-1")
    assert r.header_value("x-api-key", once) == once


def test_extra_headers_and_query_params() -> None:
    r = Redactor(KEY, headers=["X-Team-Token"])
    assert r.header_value("x-team-token", "t0k").startswith("<redacted:")
    q = r.query("alt=sse&key=AIzaSECRET")
    assert "AIzaSECRET" not in q and q.startswith("alt=sse&key=")
    assert r.query("a=1&b=2") == "a=1&b=2"


def test_json_fields_by_path_and_by_name() -> None:
    r = Redactor(KEY, fields=["metadata.token", "password"])
    body = orjson.dumps(
        {
            "metadata": {"token": "T1", "keep": "v"},
            "token": "top-level-not-a-path-match",
            "items": [{"password": "P1"}, {"nested": {"password": "P2"}}],
        }
    )
    out = r.body(body)
    assert out is not None
    doc = orjson.loads(out)
    assert doc["metadata"]["token"].startswith("<redacted:") and doc["metadata"]["keep"] == "v"
    assert doc["token"] == "top-level-not-a-path-match"
    assert doc["items"][0]["password"].startswith("<redacted:")
    assert doc["items"][1]["nested"]["password"].startswith("<redacted:")
    assert b"P1" not in out and b"P2" not in out and b"T1" not in out


def test_bodies_without_matches_are_untouched() -> None:
    r = Redactor(KEY, fields=["secret"])
    body = b'{ "a" : 1 }'
    assert r.body(body) is body
    assert r.body(None) is None
    assert Redactor(KEY).body(b"not json") == b"not json"  # no fields: nothing to find
    # JSON that names no field is passed as it is without the span scanner; a name that
    # hides behind an escape, or a body that is not JSON, still goes through it.
    big = orjson.dumps({"messages": [{"content": "x" * 50_000}], "n": [1.5] * 1000})
    assert r.body(big) is big
    hidden = b'{"sec\\u0072et": "sk-LEAK", "a": 1}'
    assert b"sk-LEAK" not in (r.body(hidden) or b"")
    assert b"sk-LEAK" not in (
        Redactor(KEY, fields=["a.secret"]).body(b'{"a": {"secret": "sk-LEAK"}}') or b""
    )


@pytest.mark.parametrize(
    "body",
    [
        # What JavaScript sends when text is cut inside an emoji: a lone surrogate escape.
        b'{"prompt": "cut \\ud83d", "api_key": "sk-LEAK"}',
        b'{"temperature": NaN, "api_key": "sk-LEAK"}',
        b'\xef\xbb\xbf{"api_key": "sk-LEAK"}',
        b'{"n": 18446744073709551616, "api_key": "sk-LEAK", "x": 1.50}',
        b'{"deep": ' + b"[" * 2000 + b'{"api_key": "sk-LEAK"}' + b"]" * 2000 + b"}",
        b'{\n  "api_key" :\t"sk-LEAK" ,\n  "ok": "\\u00e9"\n}',
        b'{"api\\u005fkey": "sk-LEAK"}',  # the same key, escaped
    ],
)
def test_only_the_secret_changes_whatever_the_json(body: bytes) -> None:
    out = Redactor(KEY, fields=["api_key"]).body(body)
    assert out is not None and b"sk-LEAK" not in out
    before, _, after = body.partition(b'"sk-LEAK"')
    assert out.startswith(before) and out.endswith(after)  # not one other byte rewritten
    assert out[len(before) : len(out) - len(after)].startswith(b'"<redacted:')


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (b"api_key=sk-LEAK&x=1", ""),  # a form, not JSON
        (b'{"api_key": "sk-LEAK"', ""),  # cut short
        (
            gzip.compress(b'{"api_key": "sk-LEAK"}', mtime=0),
            "gzip",
        ),  # mtime=0: the same id in every xdist worker
    ],
)
def test_a_body_the_fields_cannot_be_found_in_is_masked_whole(
    body: bytes, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "ssetape.redactor")
    out = Redactor(KEY, fields=["api_key"]).body(body, encoding)
    assert out is not None and orjson.loads(out).startswith("<redacted:")
    assert b"sk-LEAK" not in out


def test_websocket_subprotocol_key_is_masked_keeping_the_other_tokens() -> None:
    """Browser Realtime clients carry the key as a subprotocol token: only its key part goes."""
    r = Redactor(KEY)
    sent = "realtime, openai-insecure-api-key.sk-abc123, openai-beta.realtime-v1"
    out = r.header_value("Sec-WebSocket-Protocol", sent)
    assert "sk-abc123" not in out
    before, token, after = out.split(", ")
    assert (before, after) == ("realtime", "openai-beta.realtime-v1")
    assert token == "openai-insecure-api-key." + r.mask("sk-abc123")
    assert r.header_value("sec-websocket-protocol", out) == out  # masked once only
    assert r.header_value("sec-websocket-protocol", "realtime") == "realtime"
    # The key in the upgrade URL and Gemini's header are masked as on any request.
    assert "AIzaK" not in r.query("key=AIzaK") and "AIzaK" not in r.header_value(
        "x-goog-api-key", "AIzaK"
    )
