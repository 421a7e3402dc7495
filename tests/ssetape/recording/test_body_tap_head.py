"""A response body's tap keeps its first bytes past the bound (what `show` prints of a body
not stored whole), with the size and SHA-256 of all of it."""

from __future__ import annotations

import hashlib

from ssetape.recording.body_tap import BodyTap


def test_past_the_bound_the_head_size_and_hash_are_kept() -> None:
    tap = BodyTap(bound=10, head=4)
    parts = [b"ab", b"c", b"defghijklmnop", b"qrs"]
    assert [tap(p) for p in parts] == parts  # each chunk passes as it came
    whole = b"".join(parts)
    assert tap.over and tap.size == len(whole)
    assert tap.head() == b"abcd"
    assert tap.sha256() == hashlib.sha256(whole).hexdigest()


def test_within_the_bound_the_body_is_whole() -> None:
    tap = BodyTap(bound=10, head=4)
    for p in (b"ab", b"cdef"):
        tap(p)
    assert not tap.over and tap.body() == b"abcdef" and tap.head() == b"abcd"
    assert tap.sha256() == hashlib.sha256(b"abcdef").hexdigest()
