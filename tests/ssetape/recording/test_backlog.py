"""The proxy's backlog for its recording process: what a stranded rest costs, and the trailer
that tells the process so."""

from __future__ import annotations

from ssetape.recording.backlog import Backlog
from ssetape.recording.protocol import Begin, Chunk, Close, Finish, Gap, Lost


class Books:
    """The bookkeeping a Child keeps, without a process."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.finishing: set[str] = set()
        self.told = 0


def test_a_stranded_rest_is_counted_once_and_told_where_each_known_stream_breaks_off() -> None:
    backlog, child = Backlog(), Books()
    backlog.add([Begin("a", {}), Chunk("a", 0, b"data: 1\n\n")], 1, child)  # type: ignore[arg-type]
    handed = backlog.taken(len(backlog.out))  # the pipe took that frame whole
    backlog.add(  # type: ignore[arg-type]
        [
            Chunk("a", 1, b"data: 2\n\n"),
            Gap("a", 9, b"\n\n"),  # the proxy dropped 9 bytes of it itself...
            Lost(0, 1),  # ...and counted that event
            Begin("b", {}),
            Chunk("b", 0, b"data: 1\n\n"),
            Finish("a", 2, {}),
        ],
        2,
        child,
    )
    backlog.taken(5)  # a part of the second frame: its reader drops it whole
    rest = backlog.strand()
    assert handed == 1 and not backlog.out and not backlog.frames
    assert (rest.exchanges, rest.events, rest.own_exchanges, rest.own_events) == (1, 3, 1, 2)
    # "b" began in what it never reads: only "a" is cut short, by the bytes it misses.
    assert rest.trailer == [Gap("a", 18, b""), Lost(1, 3), Close()]
    assert rest.short == [Lost(1, 3), Close()]
