"""Live streams are bounded: past `ssetape web --max-live N` a new one is turned away with 503
and a Retry-After (the pages still load), and a client that stops reading is dropped once
what it has not read fills its queue, freeing its place."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from ssetape.storage.models import Event
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState
from tests.conftest import start_ssetape
from tests.ssetape.web.test_page_reads import add_exchange


def _status(url: str) -> int:
    """What a new live client is answered (its stream closed at once)."""
    with httpx.stream("GET", url, timeout=10) as r:
        return r.status_code


def test_past_max_live_a_new_live_client_gets_503_with_retry_after_until_one_leaves(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "tape.db")
    with Store.open(db) as store:
        done = add_exchange(store, 1)
        live = add_exchange(store, 2, state=ExchangeState.RECORDING, outcome=None)
    web = start_ssetape(["web", "--db", db, "--port", "0", "--max-live", "2"], db=db)
    try:
        with httpx.Client(timeout=10) as a, httpx.Client(timeout=10) as b:
            # Two live streams open: the list's and that of the exchange in flight.
            # (Each read through an iterator kept: httpx closes a stream whose iterator goes.)
            with a.stream("GET", web.url + "/live") as one:
                first = one.iter_raw()
                assert one.status_code == 200 and next(first).startswith(b"retry:")
                with b.stream("GET", f"{web.url}/exchanges/{live}/live") as two:
                    second = two.iter_raw()
                    assert two.status_code == 200 and next(second).startswith(b"retry:")
                    for url in ("/live", f"/exchanges/{live}/live"):
                        third = httpx.get(web.url + url, timeout=10)
                        assert third.status_code == 503, url
                        assert int(third.headers["retry-after"]) > 0
                        assert "--max-live" in third.text
                    # The pages still load.
                    for url in ("/", f"/exchanges/{done}", f"/exchanges/{live}"):
                        assert httpx.get(web.url + url, timeout=10).status_code == 200, url
            # Both gone: a new client has a place once the viewer has seen them leave.
            deadline = time.monotonic() + 10
            while _status(web.url + "/live") != 200:
                assert time.monotonic() < deadline, "no place freed"
                time.sleep(0.2)
    finally:
        assert web.stop() == 0, web.log.decode()
    assert b"Error" not in web.log and b"Traceback" not in web.log, web.log.decode()


def test_a_live_client_that_stops_reading_is_dropped_once_its_queue_fills(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "tape.db")
    events = 12_000
    with Store.open(db) as store:
        # A stream in flight with long events: its live page is sent 500 rows a second.
        x_id = add_exchange(
            store, 1, state=ExchangeState.RECORDING, outcome=None, is_stream=True,
            event_count=events,
        )  # fmt: skip
        data = "d" * 2000
        with store.Session() as s:
            s.add_all(
                Event(exchange_id=x_id, seq=i, offset_us=i * 1000, data=data, raw=b"data: d\n\n")
                for i in range(events)
            )
            s.commit()
    web = start_ssetape(["web", "--db", db, "--port", "0", "--max-live", "1"], db=db)
    stalled = socket.socket()
    try:
        # A client that asks for the stream and then reads nothing (a small receive buffer:
        # the viewer's writes back up soon).
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        host, port = web.url.removeprefix("http://").split(":")
        stalled.connect((host, int(port)))
        stalled.sendall(f"GET /exchanges/{x_id}/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        time.sleep(1)
        assert _status(web.url + "/live") == 503  # its place is taken
        # Its queue fills, it is dropped: its place is free again.
        deadline = time.monotonic() + 60
        while _status(web.url + "/live") != 200:
            assert time.monotonic() < deadline, "the client that reads nothing was never dropped"
            time.sleep(0.5)
        # Its connection is closed: what is left in its buffers, then the end.
        stalled.settimeout(10)
        got = 0
        try:
            while chunk := stalled.recv(65536):
                got += len(chunk)
        except ConnectionResetError:
            pass
        assert got < events * 2000  # it was sent far from all
    finally:
        stalled.close()
        assert web.stop() == 0, web.log.decode()
    assert b"Error" not in web.log and b"Traceback" not in web.log, web.log.decode()
