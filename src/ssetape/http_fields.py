"""What may stand in an HTTP/1.1 response head: header names, field values, status, reason.

A cassette arrives in a pull request and a store can be written by an older ssetape or by
hand, so a recorded header value like ``"a\\r\\nset-cookie: x=1"`` is somebody's input: written
as it is, it becomes a header (or a whole response) of its author's choosing. The grammar of
RFC 9110 is checked where a cassette is loaded (refused with its line) and again where a
stored value becomes bytes on a socket (:mod:`ssetape.replay.playback`: left out and logged),
here once for both.

Values are the store's strings: bytes the recorder read were decoded as UTF-8 with
``surrogateescape``, so obs-text (bytes 0x80-0xFF) stands as any character from U+0080 up,
or as a lone surrogate U+DC80-U+DCFF; other lone surrogates are not bytes at all.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = ["field_problem", "origin", "reason_problem", "status_problem", "unsafe_fields"]

# RFC 9110 5.6.2: token = 1*tchar.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# field-vchar = VCHAR / obs-text; SP and HTAB only between two of them (5.5). No CTL: no CR,
# LF or NUL, so a value can never end its line.
_VCHAR = "\x21-\x7e\x80-\ud7ff\udc80-\udcff\ue000-\U0010ffff"
_PATTERNS = {
    "field_value": f"(?:[{_VCHAR}](?:[\t {_VCHAR}]*[{_VCHAR}])?)?",
    # reason-phrase = *( HTAB / SP / VCHAR / obs-text ) (RFC 9112 4).
    "reason": f"[\t {_VCHAR}]*",
}


@functools.cache
def _pattern(name: str) -> re.Pattern[str]:
    """Compiled on first use: the ranges up to U+10FFFF take 15 ms to compile, paid at every
    start of `ssetape list` (which only needs ``origin``) if done at import."""
    return re.compile(_PATTERNS[name])


def field_problem(name: object, value: object) -> str | None:
    """What is wrong with the header ``name: value``, in a few words; None when it may be
    written as it is."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        return "its name is not an HTTP token"
    if not isinstance(value, str) or not _pattern("field_value").fullmatch(value):
        return (
            f"the value of {name} is not an HTTP field value (a control character such as CR, "
            "LF or NUL, or spaces around it)"
        )
    return None


def status_problem(status: object) -> str | None:
    """What is wrong with a status code (as "the status ..." would say it), or None."""
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        return "is not an integer from 100 to 599"
    return None


def reason_problem(reason: object) -> str | None:
    """What is wrong with a reason phrase (as "the reason phrase ..." would say it), or None."""
    if not isinstance(reason, str) or not _pattern("reason").fullmatch(reason):
        return "holds a control character (such as CR, LF or NUL)"
    return None


def unsafe_fields(pairs: Iterable[tuple[object, object]]) -> list[tuple[int, str]]:
    """(index, what is wrong) of every pair that may not be written as a header line."""
    return [
        (i, wrong)
        for i, (name, value) in enumerate(pairs)
        if (wrong := field_problem(name, value)) is not None
    ]


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(scheme: str, host: str, port: int) -> str:
    """``https://host`` (``:port`` only when it is not the scheme's default)."""
    return f"{scheme}://{host}{'' if DEFAULT_PORTS.get(scheme) == port else f':{port}'}"
