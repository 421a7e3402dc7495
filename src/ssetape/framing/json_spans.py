"""Where each member value of a JSON document lies, found without parsing it into objects.

Redaction must replace a secret field's value and touch no other byte: re-serialising a
parsed body would rewrite numbers past 64 bits, escapes and spacing, and a body some parser
refuses (a lone surrogate escape, ``NaN``, a byte order mark, nesting past a recursion
limit) would slip through unredacted. This scanner is sans-IO and tolerant: strings are
scanned as bytes (escapes are not decoded), numbers and literals are whatever runs up to the
next delimiter, depth is a list, not the call stack. It yields the span of every object
member's value with its path, and raises :class:`NotJson` for what is not JSON-shaped at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import orjson

__all__ = ["NotJson", "Span", "member_spans"]

Span = tuple[tuple[str, ...], int, int]  # (path of keys, start, end) of a member's value

_WS = frozenset(b" \t\r\n")
_DELIMITERS = frozenset(b",]}:") | _WS
_BOM = b"\xef\xbb\xbf"
# Numbers of any size and the literals, NaN and Infinity included (JavaScript sends them).
_SCALAR = re.compile(rb"-?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|Infinity|NaN)|true|false|null")


class NotJson(ValueError):
    """The bytes are not shaped like a JSON value."""


def _string_end(data: bytes, start: int) -> int:
    """The index just past the closing quote of the string opening at ``start``."""
    i = start + 1
    n = len(data)
    while True:
        j = data.find(b'"', i)
        if j < 0:
            raise NotJson(f"unterminated string at byte {start}")
        # An odd run of backslashes before the quote escapes it.
        k = j
        while k > start + 1 and data[k - 1] == 0x5C:
            k -= 1
        if (j - k) % 2 == 0:
            return j + 1
        i = j + 1
        if i >= n:
            raise NotJson(f"unterminated string at byte {start}")


def _skip_ws(data: bytes, i: int) -> int:
    n = len(data)
    while i < n and data[i] in _WS:
        i += 1
    return i


def _key(data: bytes, start: int, end: int) -> str:
    """A key as JSON means it (escapes decoded: ``"api\\u005fkey"`` is ``api_key``)."""
    raw = data[start:end]
    try:
        key = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # what orjson refuses, a lone surrogate escape, the standard library reads
            key = json.loads(raw.decode("utf-8", "surrogateescape"))
        except ValueError:
            raise NotJson(f"bad key at byte {start}") from None
    if not isinstance(key, str):
        raise NotJson(f"bad key at byte {start}")
    return key


# What the scanner expects next.
_VALUE, _AFTER, _KEY, _FIRST_KEY, _FIRST_VALUE = range(5)


def member_spans(data: bytes) -> Iterator[Span]:
    """Spans of object member values, in document order (a container's own span comes when
    it closes, after those inside it)."""
    i = 3 if data.startswith(_BOM) else 0
    n = len(data)
    # Open containers: (is an object, path of its members, its start, its key in its parent)
    stack: list[tuple[bool, tuple[str, ...], int, str | None]] = []
    state = _VALUE
    key: str | None = None  # of the member whose value comes next
    while True:
        i = _skip_ws(data, i)
        if i >= n:
            break
        c = data[i]
        if state in (_KEY, _FIRST_KEY):
            if c == 0x7D and state == _FIRST_KEY:  # {}
                state = _AFTER
            else:
                if c != 0x22:
                    raise NotJson(f"expected a key at byte {i}")
                end = _string_end(data, i)
                key = _key(data, i, end)
                i = _skip_ws(data, end)
                if i >= n or data[i] != 0x3A:
                    raise NotJson(f"expected ':' at byte {i}")
                i += 1
                state = _VALUE
                continue
        if state == _AFTER:
            if not stack:
                raise NotJson(f"more than one value, at byte {i}")
            is_object = stack[-1][0]
            if c == 0x2C:
                state = _KEY if is_object else _VALUE
                i += 1
                continue
            if c != (0x7D if is_object else 0x5D):
                raise NotJson(f"unexpected {chr(c)!r} at byte {i}")
            _, _, cstart, ckey = stack.pop()
            i += 1
            if ckey is not None:
                yield (*stack[-1][1], ckey), cstart, i
            continue
        # A value is due (or, just after "[", the list's end).
        if c == 0x5D and state == _FIRST_VALUE:
            state = _AFTER
            continue
        member, key = key, None
        path = stack[-1][1] if stack else ()
        if c in (0x7B, 0x5B):  # { [
            inner = (*path, member) if member is not None else path
            stack.append((c == 0x7B, inner, i, member))
            state = _FIRST_KEY if c == 0x7B else _FIRST_VALUE
            i += 1
            continue
        if c == 0x22:
            end = _string_end(data, i)
        else:
            end = i
            while end < n and data[end] not in _DELIMITERS:
                end += 1
            if not _SCALAR.fullmatch(data, i, end):
                raise NotJson(f"not a JSON value at byte {i}")
        if member is not None:
            yield (*path, member), i, end
        i = end
        state = _AFTER
    if stack:
        raise NotJson("the document ends inside a container")
    if state != _AFTER:
        raise NotJson("no value")
