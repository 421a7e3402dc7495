"""Drift: how the requests a test suite sends have moved away from its cassettes.

Pure comparisons (no files, no store): a request that matched its recording only because
fields were ignored, or that missed, compared field by field with the nearest recording (the
same :func:`ssetape.matching.differences` a miss's message is made from, on canonical
requests, so a field is named as ``ignore_fields`` and the miss messages name it); a
re-recorded cassette compared with what it held before, timing aside. The pytest plugin
gathers them per test (see :class:`~ssetape.testing.age.HygieneReport`) and prints the table.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from ssetape.matching import differences, one_line
from ssetape.redactor import unmask

__all__ = [
    "FIELD_ROWS",
    "VALUE_SHOWN",
    "FieldDrift",
    "RequestDrift",
    "content_changes",
    "field_drift",
    "recordings",
    "render_drift",
    "shown",
]

VALUE_SHOWN = 60  # characters of a value in the table; the JSON report has up to twice that
FIELD_ROWS = 20  # fields listed per request, at most
ABSENT = "(absent)"
_INDEX = re.compile(r"\[\d+\]")
# What changes on every recording of the same interaction: when it happened and how fast.
TIMING = frozenset({"ttfb_us", "duration_us", "offset_us", "started_at", "uid", "recorder"})
_TIMING_HEADERS = frozenset({"date", "age", "expires", "last-modified"})


@dataclass(frozen=True, slots=True)
class FieldDrift:
    """One field where a request differs from its nearest recording."""

    field: str  # "body.messages[0].content", "query", "method", "path"
    recorded: str  # shown: one printable line, cut
    requested: str
    ignored: bool  # under one of the test's ignore_fields (so it did not stop the match)


@dataclass(frozen=True, slots=True)
class RequestDrift:
    test: str  # pytest node id
    cassette: str
    request: str  # "POST host/path", one printable line
    missed: bool  # False: it matched, but only because fields were ignored
    line: int | None  # the nearest recording's cassette line
    fields: tuple[FieldDrift, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestDrift:
        fields = tuple(FieldDrift(**f) for f in d["fields"])
        return cls(d["test"], d["cassette"], d["request"], d["missed"], d["line"], fields)


def shown(value: Any, limit: int = 2 * VALUE_SHOWN) -> str:
    """A recorded or requested value as one printable line of at most ``limit`` characters:
    strings as JSON (quoted), so ``"1"`` and ``1`` stay apart and a newline is ``\\n``."""
    if isinstance(value, str) and value == _ABSENT_MARK:
        return ABSENT
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # orjson raises a TypeError subclass on what it cannot encode
        text = repr(value)
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ABSENT_MARK = "<absent>"  # what matching.differences puts for a field one side lacks


def is_ignored(field: str, ignore: Iterable[str]) -> bool:
    """Whether ``field`` (``body.messages[0].content``) is under one of the dotted paths
    ``ignore`` names (``messages.content``: ignore_fields go through lists)."""
    if not field.startswith("body."):
        return False
    bare = _INDEX.sub("", field.removeprefix("body."))
    return any(bare == p or bare.startswith(p + ".") for p in ignore)


def field_drift(
    recorded: dict[str, Any], requested: dict[str, Any], ignore: Sequence[str] = ()
) -> tuple[FieldDrift, ...]:
    """Field by field, where two canonical requests (``matching.canonical_request`` with no
    field ignored) differ; masks compare key-free, as matching compares them."""
    diffs = differences(unmask(recorded), unmask(requested), limit=FIELD_ROWS)
    return tuple(
        FieldDrift(d.field, shown(d.recorded), shown(d.requested), is_ignored(d.field, ignore))
        for d in diffs
    )


def render_drift(drifts: Sequence[RequestDrift]) -> list[str]:
    """The terminal table: per test and request, one row per field."""
    if not drifts:
        return []
    cells = [("field", "recorded", "requested")] + [
        (f.field + (" (ignored)" if f.ignored else ""), _cut(f.recorded), _cut(f.requested))
        for d in drifts
        for f in d.fields
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]

    def row(c: tuple[str, str, str]) -> str:
        return ("    " + "  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True))).rstrip()

    out = [row(cells[0])]
    for d in drifts:
        how = "missed" if d.missed else "matched, fields ignored"
        where = f"cassette line {d.line}" if d.line is not None else "no recording"
        out.append(one_line(d.test))
        out.append(f"  {d.request} ({how}; nearest: {where})")
        for f in d.fields:
            out.append(row((f.field + (" (ignored)" if f.ignored else ""),
                            _cut(f.recorded), _cut(f.requested))))  # fmt: skip
    return out


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_SHOWN else text[: VALUE_SHOWN - 1] + "…"


# -- re-recorded cassettes ---------------------------------------------------------------


def _content(line: bytes) -> bytes:
    """A cassette line without what differs between two recordings of the same interaction
    (timing, uids, date headers) and with masks key-free: equal iff the bytes recorded are."""
    if not line.strip():
        return b""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line  # not ours to judge: compared as it stands
    if isinstance(obj, dict):
        for key in TIMING:
            obj.pop(key, None)
        for name in ("request_headers", "response_headers"):
            pairs = obj.get(name)
            if isinstance(pairs, list):
                obj[name] = [
                    p for p in pairs
                    if not (isinstance(p, list) and p and str(p[0]).lower() in _TIMING_HEADERS)
                ]  # fmt: skip
    return orjson.dumps(unmask(obj), option=orjson.OPT_SORT_KEYS)


def recordings(lines: Iterable[bytes]) -> Counter[bytes]:
    """A cassette's lines as what they recorded: each exchange (its line, its events' and
    chunks' lines), timing aside, by digest (a cassette may be gigabytes)."""
    out: Counter[bytes] = Counter()
    current: list[bytes] | None = None  # one exchange's lines at a time
    for i, raw in enumerate(lines):
        if i == 0:
            continue  # the header: its redact_fields list is not a recording
        line = _content(raw)
        if not line:
            continue
        if b'"kind":"exchange"' in line or current is None:
            if current is not None:
                out[hashlib.sha256(b"\n".join(current)).digest()] += 1
            current = []
        current.append(line)
    if current is not None:
        out[hashlib.sha256(b"\n".join(current)).digest()] += 1
    return out


def content_changes(before: Counter[bytes], after: Counter[bytes]) -> str | None:
    """How a re-recorded cassette differs from what it held (both :func:`recordings`) beyond
    timing: None if only timing changed, else what did ("1 of 3 recording(s) differ")."""
    if before == after:
        return None
    gone, came = sum((before - after).values()), sum((after - before).values())
    total = sum(after.values())
    if gone == came:
        return f"{came} of {total} recording(s) differ beyond timing"
    parts = []
    if came:
        parts.append(f"{came} recording(s) new or changed")
    if gone:
        parts.append(f"{gone} gone or changed")
    return ", ".join(parts) + f" ({total} now)"
