from __future__ import annotations

import orjson

from ssetape.matching import canonical_request, fingerprint, leaves


def fp(body: bytes, query: str = "", **kw: object) -> str:
    return fingerprint(canonical_request("post", "API.openai.com", "/v1/x", query, body, **kw))  # type: ignore[arg-type]


def test_key_order_and_whitespace_do_not_matter() -> None:
    assert fp(b'{"a": 1, "b": [1, 2]}') == fp(b'{"b":[1,2],"a":1}')
    assert fp(b'{"a": 1}') != fp(b'{"a": 2}')


def test_query_order_does_not_matter_but_values_do() -> None:
    assert fp(b"", "a=1&b=2") == fp(b"", "b=2&a=1")
    assert fp(b"", "a=1") != fp(b"", "a=2")


def test_method_host_path_are_part_of_it() -> None:
    base = canonical_request("POST", "h", "/p", "", None)
    assert fingerprint(base) != fingerprint(canonical_request("GET", "h", "/p", "", None))
    assert fingerprint(base) != fingerprint(canonical_request("POST", "h2", "/p", "", None))
    assert fingerprint(base) != fingerprint(canonical_request("POST", "h", "/q", "", None))
    assert fingerprint(base) == fingerprint(canonical_request("post", "H", "/p", "", None))


def test_ignored_fields_and_host_matching() -> None:
    a = b'{"model": "m", "user": "u1", "meta": {"ts": 1, "k": 2}}'
    b = b'{"model": "m", "user": "u2", "meta": {"ts": 9, "k": 2}}'
    assert fp(a) != fp(b)
    assert fp(a, ignore=["user", "meta.ts"]) == fp(b, ignore=["user", "meta.ts"])
    assert fp(a, ignore=["user"]) != fp(b, ignore=["user"])
    h1 = canonical_request("POST", "a.example", "/p", "", None, match_host=False)
    h2 = canonical_request("POST", "b.example", "/p", "", None, match_host=False)
    assert fingerprint(h1) == fingerprint(h2)


def test_non_json_bodies_compare_as_bytes() -> None:
    assert fp(b"plain text") == fp(b"plain text") != fp(b"plain  text")


def test_leaves_share_what_two_requests_agree_on() -> None:
    a = canonical_request("POST", "h", "/p", "", b'{"m": "x", "messages": [{"c": "hi"}], "e": {}}')
    b = canonical_request("POST", "h", "/p", "", b'{"m": "x", "messages": [{"c": "ho"}], "e": []}')
    assert leaves(a) ^ leaves(b) == {
        ("body.messages[0].c", "hi"), ("body.messages[0].c", "ho"),
        ("body.e", "{}"), ("body.e", "[]"),
    }  # fmt: skip
    deep = orjson.dumps({"a": []})
    for _ in range(800):  # not recursive: no stack to run out of
        deep = b'{"a": %s}' % deep
    assert len(leaves(canonical_request("POST", "h", "/p", "", deep))) == 5
