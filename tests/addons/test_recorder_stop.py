"""A clean stop of a real `ssetape record` whose recording process is behind.

The proxy waits a bounded time for its recording process to take what is left; what that
process never gets is counted lost and told to it, so the exit line, the run row and the
exchange (``gap_seq``, ``error``) say what the store misses: stored + lost is what the client
got, whether the process was stopped (SIGSTOP) or merely slow.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx

from ssetape.framing.sse import SseParser
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, recording_process
from tests.conftest import Proc
from tests.upstreams import fixed_upstream

EVENTS = 20_000
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream"
EXIT = re.compile(
    r"ssetape: (\d+) events? in (\d+) exchanges? stored, (\d+) events? and (\d+) exchanges? lost"
)
HAND_OVER = 10.0  # how long the proxy waits for its recording process at a stop (link.close)


def sse_events(n: int) -> list[bytes]:
    """``n`` events of ~200 bytes, 100 to a chunk: 4 MB, more than the pipe holds."""
    pad = "x" * 180
    events = [b'data: {"i": %d, "pad": "%s"}\n\n' % (i, pad.encode()) for i in range(n)]
    return [b"".join(events[i : i + 100]) for i in range(0, n, 100)]


def received(url: str, path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    """The SSE events and the bytes a client got."""
    parser, n, body = SseParser(), 0, bytearray()
    with httpx.Client(timeout=60) as c, c.stream("POST", url + path) as r:
        for chunk in r.iter_raw():
            n += len(parser.feed(chunk))
            body += chunk
    return n + len(parser.close()), bytes(body)


def stopped_while_behind(
    recorders: Recorders, db: str, chunks: list[bytes], head: bytes, path: str
) -> tuple[int, bytes, Proc]:
    """A stream through a recorder whose recording process is stopped (SIGSTOP) until after
    the proxy, stopped with SIGTERM, gave its backlog up."""
    with fixed_upstream(head, chunks) as upstream:
        proc = recorders.start(db, "--mode", f"reverse:{upstream}")
        child = recording_process(proc)
        os.kill(child, signal.SIGSTOP)
        try:
            got, body = received(proc.url, path)
            proc.proc.send_signal(signal.SIGTERM)
            time.sleep(HAND_OVER + 2.0)  # the proxy gives the backlog up meanwhile
        finally:
            os.kill(child, signal.SIGCONT)
        assert proc.proc.wait(60) == 0, proc.log.decode()
    log = proc.log.decode()
    assert "did not take the last" in log and "Traceback" not in log, log
    return got, body, proc


def test_a_clean_stop_counts_what_a_stopped_recording_process_never_took(
    recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    got, _, proc = stopped_while_behind(
        recorders, db, sse_events(EVENTS), HEAD, "/v1/chat/completions"
    )
    log = proc.log.decode()
    assert got == EVENTS
    m = EXIT.search(log)
    assert m, log
    stored, exchanges, lost, lost_exchanges = map(int, m.groups())
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        rows = len(list(Queries(store).events(x.id)))
        [run] = Runs(store).all()
    # Most of it never reached the recording process, and all of it is accounted for.
    assert (stored, exchanges, lost_exchanges) == (rows, 1, 0)
    assert lost > EVENTS // 2 and stored + lost == got
    assert (run.events_recorded, run.events_lost) == (stored, lost)
    # The exchange says where its recording breaks off, and why.
    assert x.state == "interrupted" and x.gap_seq == x.event_count == rows
    assert x.error is not None and "bytes not recorded" in x.error


def test_a_clean_stop_counts_what_a_stopped_recording_process_never_took_of_a_json_array(
    recorders: Recorders, tmp_path: Path
) -> None:
    """Gemini's JSON array over ``application/json``, bracket-dense: the store keeps it chunk
    by chunk, so what it misses is counted in chunks, and its ``error`` names the bytes."""
    db = str(tmp_path / "tape.db")
    element = b'{"candidates": [' + b"[" * 2000 + b"]" * 2000 + b"]}"
    chunks = [b"[" + element] + [b"," + element] * 999 + [b"]"]  # 4 MB, 1,001 chunks
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json"
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    _, body, proc = stopped_while_behind(recorders, db, chunks, head, path)
    log = proc.log.decode()
    assert body == b"".join(chunks)
    m = EXIT.search(log)
    assert m, log
    stored, exchanges, lost, lost_exchanges = map(int, m.groups())
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        rows = list(Queries(store).events(x.id))
        [run] = Runs(store).all()
    kept = b"".join(e.raw for e in rows)
    assert (stored, exchanges, lost_exchanges) == (len(rows), 1, 0) and lost > 0
    assert (run.events_recorded, run.events_lost) == (stored, lost)
    assert x.gap_seq == x.event_count == len(rows) and x.error is not None
    missing = re.search(r"(\d+) bytes not recorded", x.error)
    assert missing and body.startswith(kept) and len(kept) + int(missing[1]) == len(body)
