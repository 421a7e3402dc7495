"""JsonArrayParser: the streamed JSON array of Gemini's non-SSE ``streamGenerateContent``."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssetape.framing.json_array import DEFAULT_MAX_ELEMENT, JsonArrayParser

# Gemini's own framing: CRLF before each comma and before the closing bracket.
GEMINI = (
    b'[{"candidates": [{"content": {"parts": [{"text": "Hi"}],"role": "model"}}]}\r\n'
    b',{"candidates": [{"content": {"parts": [{"text": " there"}],"role": "model"},'
    b'"finishReason": "STOP"}]}\r\n]'
)
TRICKY = (
    b'[ {"a": "]}\\"", "b": ["[", "{"]} ,\n "x\\\\" , [[1, [2]], {}], 12.5e3, true ,null,'
    b' {"c": "caf\xc3\xa9 \\u00e9 \\\\"}, "\\"]" ]  \n'
)
TRICKY_ELEMENTS = [
    b'{"a": "]}\\"", "b": ["[", "{"]}',
    b'"x\\\\"',
    b"[[1, [2]], {}]",
    b"12.5e3",
    b"true",
    b"null",
    b'{"c": "caf\xc3\xa9 \\u00e9 \\\\"}',
    b'"\\"]"',
]


def run(
    data: bytes, sizes: list[int] | None = None, **kw: int
) -> tuple[list[bytes], JsonArrayParser]:
    """Feed ``data`` in pieces of the given sizes (cycled; whole when None), then close."""
    p = JsonArrayParser(**kw)
    out: list[bytes] = []
    if sizes is None:
        out += p.feed(data)
    else:
        i = k = 0
        while i < len(data):
            size = max(1, sizes[k % len(sizes)])
            out += p.feed(data[i : i + size])
            i, k = i + size, k + 1
    return out + p.close(), p


def test_gemini_array_elements() -> None:
    out, p = run(GEMINI)
    assert [orjson.loads(e)["candidates"][0]["content"]["parts"][0]["text"] for e in out] == [
        "Hi",
        " there",
    ]
    assert out[0].startswith(b"{") and out[0].endswith(b"}")
    assert p.ended and not p.invalid and p.dropped == 0 and p.pending == 0


@pytest.mark.parametrize("data", [GEMINI, TRICKY])
def test_byte_by_byte_equals_whole(data: bytes) -> None:
    whole, _ = run(data)
    assert run(data, [1])[0] == whole


def test_strings_escapes_nesting_and_scalars() -> None:
    out, p = run(TRICKY)
    assert out == TRICKY_ELEMENTS
    assert orjson.loads(out[0]) == {"a": ']}"', "b": ["[", "{"]}
    assert p.ended


@given(st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_any_chunking_gives_the_same_elements(sizes: list[int]) -> None:
    assert run(TRICKY, sizes)[0] == TRICKY_ELEMENTS


def test_elements_are_returned_as_soon_as_they_close() -> None:
    p = JsonArrayParser()
    assert p.feed(b'[{"a": [1') == []
    assert p.pending == len(b'{"a": [1')
    assert p.feed(b"]}") == [b'{"a": [1]}']
    assert p.feed(b"\r\n,") == []
    # A bare scalar only ends at its delimiter: "12" could still become "123".
    assert p.feed(b"12") == []
    assert p.feed(b"3\r\n") == [b"123"]
    assert p.feed(b"]") == []
    assert p.ended


@pytest.mark.parametrize("data", [b"[]", b"  [ \r\n ]\r\n", b"[\r\n]"])
def test_empty_array(data: bytes) -> None:
    out, p = run(data)
    assert out == []
    assert p.ended and not p.invalid


@pytest.mark.parametrize(
    "data", [b'{"error": {"code": 429}}', b"data: {}", b"  x[1]", b"\xef\xbb\xbf[]"]
)
def test_not_an_array_is_invalid_and_ignored(data: bytes) -> None:
    p = JsonArrayParser()
    assert p.feed(data) == []
    assert p.invalid
    assert p.feed(b"[1, 2]") == []
    assert p.close() == []


def test_whitespace_alone_is_not_yet_invalid() -> None:
    p = JsonArrayParser()
    assert p.feed(b" \r\n") == []
    assert not p.invalid


def test_elements_over_the_bound_are_dropped_not_buffered() -> None:
    big = b'{"t": "' + b"x" * 100 + b'"}'
    data = b"[" + big + b",\r\n" + b'{"ok": 1}' + b",\r\n" + big + b"]"
    for sizes in (None, [1], [7, 30]):
        out, p = run(data, sizes, max_element=50)
        assert out == [b'{"ok": 1}']
        assert p.dropped == 2
    # While a too-large element streams in, nothing of it is kept.
    p = JsonArrayParser(max_element=50)
    p.feed(b"[" + big[:40])
    assert p.pending == 40
    p.feed(big[40:80])
    assert p.pending == 0
    assert p.feed(big[80:] + b',"y"]') == [b'"y"']
    assert p.dropped == 1


def test_an_element_exactly_at_the_bound_is_kept() -> None:
    element = b'{"t": "' + b"x" * 10 + b'"}'
    out, p = run(b"[" + element + b"]", [3], max_element=len(element))
    assert out == [element]
    assert p.dropped == 0
    assert JsonArrayParser().max_element == DEFAULT_MAX_ELEMENT == 16 * 1024 * 1024


def test_close_returns_the_unfinished_element() -> None:
    p = JsonArrayParser()
    assert p.feed(b'[{"a": 1},\r\n{"b": "unterminated') == [b'{"a": 1}']
    assert p.close() == [b'{"b": "unterminated']
    assert p.close() == []
    assert not p.ended
    with pytest.raises(ValueError):
        p.feed(b"]")
    # A scalar waiting for its delimiter is complete at the end of the input.
    q = JsonArrayParser()
    assert q.feed(b"[1, 2") == [b"1"]
    assert q.close() == [b"2"]
    # A dropped element's remainder is counted, not returned.
    r = JsonArrayParser(max_element=4)
    r.feed(b'["abcdefgh')
    assert r.close() == []
    assert r.dropped == 1


def test_input_after_the_closing_bracket_is_ignored() -> None:
    p = JsonArrayParser()
    assert p.feed(b"[1]\r\n[2]") == [b"1"]
    assert p.feed(b"{}") == []
    assert p.ended


def test_escape_split_across_feeds() -> None:
    p = JsonArrayParser()
    assert p.feed(b'["a\\') == []
    assert p.feed(b'"') == []  # the escaped quote does not end the string
    assert p.feed(b'b"') == [b'"a\\"b"']


def test_work_is_linear_in_the_input() -> None:
    # One large element fed in small pieces: a rescan from its start on every feed would be
    # quadratic (2 GB of scanning here) and time out.
    element = b'{"t": "' + b"y" * 2_000_000 + b'"}'
    p = JsonArrayParser()
    out = p.feed(b"[")
    for i in range(0, len(element), 1000):
        out += p.feed(element[i : i + 1000])
    assert out == [element]


def test_max_element_must_be_positive() -> None:
    with pytest.raises(ValueError):
        JsonArrayParser(max_element=0)


# Bracket-dense values: deep and shallow nests, strings holding brackets, in any mix.
DENSE = st.recursive(
    st.one_of(
        st.integers(-(2**63), 2**63 - 1), st.sampled_from(["[", "]", "{", "}", '"', "x"]), st.none()
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.sampled_from("ab[]{}"), inner, max_size=3)
    ),
    max_leaves=200,
)


@given(
    st.lists(DENSE, min_size=1, max_size=8),
    st.lists(st.integers(1, 300), min_size=1, max_size=5),
    st.integers(0, 300),
)
def test_bracket_dense_elements_split_exactly_under_any_chunking(
    values: list[object], sizes: list[int], deep: int
) -> None:
    elements = [orjson.dumps(v) for v in values]
    elements.append(b"[" * deep + b"1" + b"]" * deep)  # deeper than a window of 64 bytes
    out, _ = run(b"[" + b",".join(elements) + b"]", sizes)
    assert out == elements
