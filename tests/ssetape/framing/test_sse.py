import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssetape.framing.sse import SseEvent, SseParser

BOM = b"\xef\xbb\xbf"


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events + parser.close()


def parse_split(data: bytes, cuts: list[int]) -> list[SseEvent]:
    bounds = [0, *sorted(cuts), len(data)]
    return parse(*(data[a:b] for a, b in itertools.pairwise(bounds)))


def ev(
    raw: bytes,
    *,
    event: str | None = None,
    data: str | None = None,
    id: str | None = None,
    retry: int | None = None,
    comments: tuple[str, ...] = (),
    complete: bool = True,
) -> SseEvent:
    return SseEvent(raw, event, data, id, retry, comments, complete)


# --- A deliberately naive reference: whole input at once, one decode per line. ---

_LINE_END = re.compile(rb"\r\n|\r|\n")


def _reference_event(raw: bytes, lines: list[bytes], complete: bool) -> SseEvent:
    event = id_ = None
    retry = None
    data: list[str] = []
    has_data = False
    comments: list[str] = []
    for line_bytes in lines:
        line = line_bytes.decode("utf-8", "replace")
        if line.startswith(":"):
            comments.append(line[1:].removeprefix(" "))
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            has_data = True
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\x00" not in value:
            id_ = value
        elif name == "retry" and re.fullmatch(r"[0-9]+", value):
            retry = int(value)
    joined = "\n".join(data) if has_data else None
    return SseEvent(raw, event, joined, id_, retry, tuple(comments), complete)


def reference(data: bytes) -> list[SseEvent]:
    events = []
    block_start = 0
    lines: list[bytes] = []
    i = 3 if data.startswith(BOM) else 0
    while (m := _LINE_END.search(data, i)) is not None:
        line = data[i : m.start()]
        i = m.end()
        if line:
            lines.append(line)
        else:
            events.append(_reference_event(data[block_start:i], lines, True))
            block_start, lines = i, []
    if block_start < len(data):
        if i < len(data):
            lines.append(data[i:])
        events.append(_reference_event(data[block_start:], lines, False))
    return events


# --- Line ends ---


@pytest.mark.parametrize("nl", [b"\n", b"\r", b"\r\n"])
def test_line_end_styles_are_equivalent(nl: bytes) -> None:
    raw1 = b"event: a" + nl + b"data: 1" + nl + b"data: 2" + nl + nl
    raw2 = b"data: x" + nl + nl
    assert parse(raw1 + raw2) == [
        ev(raw1, event="a", data="1\n2"),
        ev(raw2, data="x"),
    ]


def test_mixed_line_ends_in_one_block() -> None:
    raw = b"data: a\rdata: b\r\ndata: c\n\r\n"
    assert parse(raw) == [ev(raw, data="a\nb\nc")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == []
    # The trailing CR ends the block only if no LF follows, so the block must wait.
    assert parser.pending == len(b"data: a\r\n\r")
    assert parser.feed(b"\ndata: b\n\n") == [
        ev(b"data: a\r\n\r\n", data="a"),
        ev(b"data: b\n\n", data="b"),
    ]
    assert parser.pending == 0
    assert parser.close() == []


def test_block_ending_in_cr_is_emitted_when_next_byte_is_not_lf() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\r\r") == []
    assert parser.feed(b"data: b") == [ev(b"data: a\r\r", data="a")]
    assert parser.close() == [ev(b"data: b", data="b", complete=False)]


def test_trailing_cr_blank_line_is_complete_at_close() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\r") == []
    assert parser.close() == [ev(b"data: a\n\r", data="a")]


def test_lone_cr_blank_line_at_block_start() -> None:
    parser = SseParser()
    assert parser.feed(b"\r") == []
    assert parser.feed(b"\r\n") == [ev(b"\r"), ev(b"\r\n")]
    assert parser.feed(b"\r") == []
    assert parser.close() == [ev(b"\r")]


def test_extra_blank_lines_are_their_own_blocks() -> None:
    assert parse(b"data: a\n\n\n\r\n") == [ev(b"data: a\n\n", data="a"), ev(b"\n"), ev(b"\r\n")]


# --- Decoding ---


def test_multibyte_character_split_across_chunks() -> None:
    raw = "data: prix 5€ ✓\n\n".encode()
    cut = raw.index(b"\xe2\x82\xac") + 1
    assert parse(raw[:cut], raw[cut:]) == [ev(raw, data="prix 5€ ✓")]


def test_invalid_utf8_is_replaced() -> None:
    raw = b"data: \xff\xe2\x82\n\n"
    assert parse(raw) == [ev(raw, data="\ufffd\ufffd")]


def test_nul_in_data_is_kept() -> None:
    raw = b"data: a\x00b\n\n"
    assert parse(raw) == [ev(raw, data="a\x00b")]


# --- Fields ---


def test_comment_lines_belong_to_their_block() -> None:
    raw = b": first\n:second\n:  third\ndata: x\n\n"
    assert parse(raw) == [ev(raw, data="x", comments=("first", "second", " third"))]


def test_comment_only_block_is_emitted() -> None:
    parser = SseParser()
    [keepalive] = parser.feed(b": keepalive\n\n")
    assert keepalive == ev(b": keepalive\n\n", comments=("keepalive",))
    assert keepalive.type is None
    assert keepalive.data is None


def test_empty_comment() -> None:
    assert parse(b":\n\n") == [ev(b":\n\n", comments=("",))]


def test_multi_line_data() -> None:
    raw = b"data: line one\ndata:\ndata: line three\n\n"
    assert parse(raw)[0].data == "line one\n\nline three"


def test_value_whitespace() -> None:
    assert parse(b"data:x\n\n")[0].data == "x"
    assert parse(b"data:  x \n\n")[0].data == " x "
    assert parse(b"data: \n\n")[0].data == ""


def test_field_without_colon_has_empty_value() -> None:
    [event] = parse(b"data\n\n")
    assert event.data == ""
    assert event.type == "message"
    [event] = parse(b"event\ndata: x\n\n")
    assert event.event == ""
    assert event.type == "message"


def test_event_id_retry() -> None:
    raw = b"event: a\nevent: update\nid: 1\nid: 42\nretry: 10\nretry: 3000\ndata: {}\n\n"
    [event] = parse(raw)
    assert event == ev(raw, event="update", data="{}", id="42", retry=3000)
    assert event.type == "update"


@pytest.mark.parametrize("value", ["", "12a", "-1", " 5", "1.5", "²", "١٢"])
def test_invalid_retry_is_ignored(value: str) -> None:
    raw = b"retry: 7\nretry: " + value.encode() + b"\ndata: x\n\n"
    assert parse(raw)[0].retry == 7
    assert parse(b"retry: " + value.encode() + b"\n\n")[0].retry is None


def test_id_with_nul_is_ignored() -> None:
    assert parse(b"id: 1\nid: 2\x003\n\n")[0].id == "1"
    assert parse(b"id: a\x00\n\n")[0].id is None


def test_empty_id_is_kept() -> None:
    assert parse(b"id: 5\nid\n\n")[0].id == ""


def test_unknown_fields_and_field_only_blocks() -> None:
    raw = b"foo: bar\nDATA: upper\ndata : spaced\n\n"
    assert parse(raw) == [ev(raw)]
    [event] = parse(b"id: 9\n\n")
    assert event.id == "9"
    assert event.type is None


# --- BOM ---


def test_bom_is_skipped_for_parsing_but_kept_in_raw() -> None:
    raw = BOM + b"data: x\n\n"
    assert parse(raw) == [ev(raw, data="x")]


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_bom_split_across_chunks(cut: int) -> None:
    raw = BOM + b"event: e\ndata: x\n\n"
    assert parse(raw[:cut], raw[cut:]) == [ev(raw, event="e", data="x")]


def test_only_the_first_bom_is_skipped() -> None:
    # A second BOM is part of the field name, which then is not "data".
    assert parse(BOM + BOM + b"data: x\n\n")[0].data is None
    assert parse(b"\n" + BOM + b"data: x\n\n") == [ev(b"\n"), ev(BOM + b"data: x\n\n")]


def test_bom_before_blank_line() -> None:
    assert parse(BOM + b"\r\ndata: x\n\n") == [ev(BOM + b"\r\n"), ev(b"data: x\n\n", data="x")]


# --- End of stream ---


def test_empty_input() -> None:
    parser = SseParser()
    assert parser.feed(b"") == []
    assert parser.pending == 0
    assert parser.close() == []


def test_final_event_without_blank_line_is_incomplete() -> None:
    assert parse(b"data: a\n\ndata: b\n") == [
        ev(b"data: a\n\n", data="a"),
        ev(b"data: b\n", data="b", complete=False),
    ]


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (b"data: [DO", ev(b"data: [DO", data="[DO", complete=False)),
        (b": partial comm", ev(b": partial comm", comments=("partial comm",), complete=False)),
        (b"  \t", ev(b"  \t", complete=False)),
        (b"\xe2\x82", ev(b"\xe2\x82", complete=False)),
        (b"event: x\r\ndata", ev(b"event: x\r\ndata", event="x", data="", complete=False)),
    ],
)
def test_leftover_bytes_are_emitted_at_close(tail: bytes, expected: SseEvent) -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\n" + tail) == [ev(b"data: a\n\n", data="a")]
    assert parser.pending == len(tail)
    assert parser.close() == [expected]
    assert parser.pending == 0


def test_close_is_idempotent_and_feed_after_close_fails() -> None:
    parser = SseParser()
    parser.feed(b"data: x")
    assert len(parser.close()) == 1
    assert parser.close() == []
    with pytest.raises(ValueError):
        parser.feed(b"data: y\n\n")


# --- Real-world streams ---


def test_openai_stream() -> None:
    chunks = [
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
        b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    events = parse(*chunks)
    assert [e.raw for e in events] == chunks
    assert [e.type for e in events] == ["message"] * 3
    assert events[-1].data == "[DONE]"


def test_anthropic_stream() -> None:
    stream = (
        b'event: message_start\ndata: {"type":"message_start"}\n\n'
        b'event: ping\ndata: {"type": "ping"}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":'
        b'{"type":"text_delta","text":"Hello"}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    events = parse(stream)
    assert [e.type for e in events] == [
        "message_start",
        "ping",
        "content_block_delta",
        "message_stop",
    ]
    assert events[1].data == '{"type": "ping"}'
    assert all(e.complete for e in events)


def test_many_events_in_one_chunk_and_pending() -> None:
    parser = SseParser()
    events = parser.feed(b"data: 1\n\n" * 1000 + b"data: par")
    assert [e.data for e in events] == ["1"] * 1000
    assert parser.pending == len(b"data: par")


@pytest.mark.timeout(20)
def test_large_event_in_small_chunks_is_not_quadratic() -> None:
    # 4 MiB of 64-byte lines arriving line by line: rescanning from the block start on every
    # chunk would cost terabytes of scanning, far beyond the timeout.
    line = b"data: " + b"x" * 57 + b"\n"
    parser = SseParser()
    for _ in range(65536):
        assert parser.feed(line) == []
    [event] = parser.feed(b"\n")
    assert event.data is not None
    assert len(event.data) == 65536 * 58 - 1


def test_non_bytes_chunks_give_bytes_raw() -> None:
    parser = SseParser()
    [event] = parser.feed(bytearray(b"data: x\n\n"))  # type: ignore[arg-type]
    assert type(event.raw) is bytes
    assert parser.feed(memoryview(b"data: y\n")) == []  # type: ignore[arg-type]
    [event] = parser.feed(memoryview(b"\n"))  # type: ignore[arg-type]
    assert event.raw == b"data: y\n\n"
    assert type(event.raw) is bytes


# --- Properties ---

TOKENS = [
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b":",
    b": ",
    b" ",
    b"data",
    b"event",
    b"id",
    b"retry",
    b"1",
    b"x",
    b"\x00",
    b"\xff",
    b"\xe2\x82\xac",
    b"\xe2",
    BOM,
]
sse_ish_bytes = st.one_of(
    st.binary(max_size=120),
    st.lists(st.sampled_from(TOKENS), max_size=60).map(b"".join),
)


@st.composite
def bytes_and_cuts(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    data = draw(sse_ish_bytes)
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=12))
    return data, cuts


@settings(max_examples=400, deadline=None)
@given(bytes_and_cuts())
def test_any_chunking_gives_the_same_events(case: tuple[bytes, list[int]]) -> None:
    data, cuts = case
    whole = parse(data)
    assert b"".join(e.raw for e in whole) == data
    assert whole == reference(data)
    assert parse_split(data, cuts) == whole
    assert all(e.complete for e in whole[:-1])


@settings(max_examples=150, deadline=None)
@given(sse_ish_bytes)
def test_byte_by_byte_feeding(data: bytes) -> None:
    assert parse(*(data[i : i + 1] for i in range(len(data)))) == parse(data)


text_values = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=12
)
line_item = st.one_of(
    st.tuples(st.just("comment"), text_values),
    st.tuples(st.just("data"), text_values),
    st.tuples(st.just("event"), text_values),
    st.tuples(st.just("id"), text_values.filter(lambda v: "\x00" not in v)),
    st.tuples(st.just("retry"), st.integers(0, 10**6).map(str)),
)


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(st.lists(line_item, max_size=6), max_size=8),
    newlines=st.lists(st.sampled_from(["\n", "\r", "\r\n"]), min_size=1, max_size=5),
    bom=st.booleans(),
    no_space=st.booleans(),
    cuts=st.lists(st.integers(0, 10**4), max_size=8),
)
def test_well_formed_streams_round_trip(
    blocks: list[list[tuple[str, str]]],
    newlines: list[str],
    bom: bool,
    no_space: bool,
    cuts: list[int],
) -> None:
    counter = 0
    previous = ""

    def nl(after_empty_line: bool = False) -> str:
        nonlocal counter, previous
        counter += 1
        chosen = newlines[counter % len(newlines)]
        if after_empty_line and previous == "\r" and chosen == "\n":
            # CR then LF would be read as one CRLF, swallowing the blank line.
            chosen = "\r\n"
        previous = chosen
        return chosen

    stream = b""
    expected: list[SseEvent] = []
    for items in blocks:
        text = ""
        for kind, value in items:
            # "name:value" is only unambiguous when the value has no leading space.
            sep = ":" if no_space and not value.startswith(" ") else ": "
            text += (":" + sep[1:] + value if kind == "comment" else kind + sep + value) + nl()
        raw = text.encode() + nl(after_empty_line=True).encode()
        if bom and not expected:
            raw = BOM + raw
        stream += raw
        datas = [v for k, v in items if k == "data"]
        last = {k: v for k, v in items}
        expected.append(
            ev(
                raw,
                event=last.get("event"),
                data="\n".join(datas) if datas else None,
                id=last.get("id"),
                retry=int(last["retry"]) if "retry" in last else None,
                comments=tuple(v for k, v in items if k == "comment"),
            )
        )
    assert parse(stream) == expected
    assert parse_split(stream, [c % (len(stream) + 1) for c in cuts]) == expected
    for event, items in zip(expected, blocks, strict=True):
        kinds = {k for k, _ in items}
        assert event.type == ((event.event or "message") if "data" in kinds else None)
