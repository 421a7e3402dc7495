"""Checks a test makes on the streams it was served, one line each::

    (chat,) = ssetape.exchanges()
    assert_stream(chat, ttft_under=500, no_gap_over=500, usage=True, tool_calls=["get_weather"])
    assert_no_gap_over(chat, 500)  # the same checks, one at a time

A failed check raises AssertionError naming the exchange, the event (seq, name, offset) and
the threshold: ``exchange #1 POST /v1/responses (cassette line 2): gap of 1503.2 ms before
event #41 (response.output_text.delta at 2101.7 ms), after event #38 at 598.5 ms, is over
500 ms``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ssetape.matching import one_line
from ssetape.vocabulary import Outcome

if TYPE_CHECKING:
    from ssetape.testing.stream_record import StreamEvent, StreamRecord

__all__ = [
    "assert_completed", "assert_no_findings", "assert_no_gap_over", "assert_stream",
    "assert_tool_calls", "assert_ttft_under", "assert_usage", "findings_report",
]  # fmt: skip

_SHOWN = 10  # findings a message lists, at most


def _fail(record: StreamRecord, what: str) -> AssertionError:
    # Paths, event names, tool names and details are recorded text, printed to a terminal and
    # a test report: one printable line, so an escape sequence cannot act nor forge a line.
    return AssertionError(one_line(f"{record.label}: {what}"))


def _at(record: StreamRecord, seq: int | None) -> str:
    """``at event #12 (error at 812.3 ms)``, or ``on the stream as a whole``."""
    if seq is None:
        return "on the stream as a whole"
    event = record.event(seq)
    return f"at {event.where()}" if event is not None else f"at event #{seq}"


def _last(record: StreamRecord) -> str:
    if not record.event_count:
        return "no events"
    event = record.event(record.event_count - 1)
    return f"{record.event_count} events, the last {event.where()}" if event else ""


def finding_lines(record: StreamRecord) -> list[str]:
    lines = [f"{f.code} {_at(record, f.seq)}: {f.detail}" for f in record.findings[:_SHOWN]]
    if len(record.findings) > _SHOWN:
        lines.append(f"... and {len(record.findings) - _SHOWN} more")
    return lines


def assert_no_findings(record: StreamRecord) -> None:
    """The stream broke none of its API's rules (ssetape's findings)."""
    if record.findings:
        lines = finding_lines(record)
        raise _fail(record, f"{len(record.findings)} finding(s): " + "; ".join(lines))


def assert_completed(record: StreamRecord) -> None:
    """The answer ended as completed (not an error, cut, refusal or incomplete)."""
    if record.outcome != Outcome.COMPLETED:
        why = f" ({record.reason})" if record.reason else ""
        raise _fail(record, f"outcome is {record.outcome}{why}, not completed; {_last(record)}")


def assert_ttft_under(record: StreamRecord, ms: float) -> None:
    """The first content (text, reasoning, tool arguments) came within ``ms``."""
    if record.ttft_ms is None:
        raise _fail(record, f"no content arrived ({_last(record)}), so no TTFT under {ms:g} ms")
    if record.ttft_ms >= ms:
        first = next(record.content_events(), None)
        where = f" ({first.where()})" if first is not None else ""
        raise _fail(record, f"TTFT of {record.ttft_ms:.1f} ms{where} is not under {ms:g} ms")


def assert_no_gap_over(record: StreamRecord, ms: float) -> None:
    """No pause between two content-bearing events (keep-alives do not count) over ``ms``;
    the message names the longest such pause."""
    if record.gaps.max_ms is not None and record.gaps.max_ms <= ms:
        return  # the stored figure says so: no event need be read
    worst: tuple[float, StreamEvent, StreamEvent] | None = None
    over = 0
    before: StreamEvent | None = None
    for event in record.content_events():
        if before is not None:
            gap = event.offset_ms - before.offset_ms
            if gap > ms:
                over += 1
                if worst is None or gap > worst[0]:
                    worst = (gap, before, event)
        before = event
    if worst is None:
        return
    gap, prev, event = worst
    more = f" ({over} gaps over it)" if over > 1 else ""
    raise _fail(
        record,
        f"gap of {gap:.1f} ms before {event.where()}, after event #{prev.seq} at "
        f"{prev.offset_ms:.1f} ms, is over {ms:g} ms{more}",
    )


def assert_usage(record: StreamRecord) -> None:
    """The stream reported its token usage (the usage chunk, message_delta, ...)."""
    if not record.usage.present:
        raise _fail(record, f"no usage arrived: token counts unknown ({_last(record)})")


def assert_tool_calls(record: StreamRecord, names: Sequence[str]) -> None:
    """The answer called exactly these tools, in this order."""
    if isinstance(names, str):
        names = [names]
    called = [c.name for c in record.tool_calls]
    if called != list(names):
        raise _fail(record, f"tool calls {called} are not the expected {list(names)}")


def assert_stream(
    record: StreamRecord,
    *,
    findings: bool = False,
    completed: bool = True,
    ttft_under: float | None = None,
    no_gap_over: float | None = None,
    usage: bool = False,
    tool_calls: Sequence[str] | None = None,
) -> None:
    """Several checks in one line: no findings (unless ``findings=True`` allows them) and
    completed (unless ``completed=False``), then each one asked for."""
    if not findings:
        assert_no_findings(record)
    if completed:
        assert_completed(record)
    if ttft_under is not None:
        assert_ttft_under(record, ttft_under)
    if no_gap_over is not None:
        assert_no_gap_over(record, no_gap_over)
    if usage:
        assert_usage(record)
    if tool_calls is not None:
        assert_tool_calls(record, tool_calls)


def findings_report(records: Iterable[StreamRecord]) -> str:
    """What ``--ssetape-strict`` fails a test with: every finding of its streams."""
    parts = [
        "\n".join(
            [f"  {one_line(r.label)}:", *(f"    - {one_line(line)}" for line in finding_lines(r))]
        )
        for r in records
        if r.findings
    ]
    if not parts:
        return ""
    head = "ssetape (--ssetape-strict): the test's streams carry findings:"
    return "\n".join([head, *parts])
