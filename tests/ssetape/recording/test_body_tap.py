"""The request body tap: every chunk passes as it came; the body is kept up to its bound and
stood in for past it exactly as a body buffered whole is (so replay matches either)."""

from __future__ import annotations

import pytest

from ssetape.matching import placeholder
from ssetape.recording.body_tap import BodyTap


@pytest.mark.parametrize("size", [0, 9, 10, 11, 35])
def test_the_tap_keeps_or_stands_in_as_a_buffered_body_would(size: int) -> None:
    body = bytes(range(size))
    tap = BodyTap(bound=10)
    pieces = [body[i : i + 4] for i in range(0, size, 4)]
    assert all(tap(p) is p for p in pieces)  # the very chunk goes on
    assert tap(b"") == b""  # mitmproxy's end of message
    assert tap.size == size and tap.over == (size > 10)
    assert tap.body() == (placeholder(body) if size > 10 else body)


def test_a_failing_tap_still_passes_every_chunk(caplog: pytest.LogCaptureFixture) -> None:
    tap = BodyTap(bound=4)
    tap._parts = None  # type: ignore[assignment]  # a bug in recording
    assert tap(b"abc") == b"abc" and tap(b"def") == b"def"
    assert tap.broken and "traffic continues" in caplog.text
    with pytest.raises(RuntimeError):
        tap.body()
