"""The JSON span scanner against real JSON (any document orjson writes) and against junk."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssetape.framing.json_spans import NotJson, member_spans

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)  # orjson writes them as null
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


def members(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, value) of every object member, as the scanner should report them (list items
    do not add to a path; a container comes after what is inside it)."""
    out: list[tuple[tuple[str, ...], Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out += members(v, (*path, k))
            out.append(((*path, k), v))
    elif isinstance(node, list):
        for v in node:
            out += members(v, path)
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.booleans())
def test_every_member_value_is_found_where_it_is(doc: Any, indent: bool) -> None:
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0)
    found = [(path, orjson.loads(data[start:end])) for path, start, end in member_spans(data)]
    assert found == members(doc)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_junk_is_refused_never_misread(data: bytes) -> None:
    try:
        spans = list(member_spans(data))
    except NotJson:
        return
    orjson.loads(data.removeprefix(b"\xef\xbb\xbf"))  # what it accepts, orjson reads too
    assert all(0 <= s <= e <= len(data) for _, s, e in spans)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"a"}', b'{"a": }', b"[1,,]", b"}", b'"unterminated', b"api_key=x", b"1 2"],
)
def test_what_is_not_json(data: bytes) -> None:
    with pytest.raises(NotJson):
        list(member_spans(data))
