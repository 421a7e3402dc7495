"""A hostile upstream through a real `ssetape record`: a gzip stream of 2 MB that inflates to
2 GiB reaches the client byte for byte while the recording process stays small (its peak
resident memory read from /proc), and the exchange keeps the wire bytes and says what it did
not decode."""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import start_ssetape
from tests.upstreams import fixed_upstream

INFLATED = 2 << 30  # what the body decodes to
BLOCK = 16 << 20
WORKER_PEAK = 128 << 20  # the recording process's bound while the bomb streams (VmHWM)
PROXY_PEAK = 256 << 20  # the proxy's: it relays the wire bytes, never decodes them


def gzip_bomb() -> tuple[bytes, bytes]:
    """The head (gzip header, one real event) and a block of compressed zeros that can be
    repeated: each ends in a full flush, so no block refers back to another."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = co.compress(b"data: 1\n\n") + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(bytes(BLOCK)) + co.flush(zlib.Z_FULL_FLUSH)
    return head, block


@pytest.fixture
def bomb_upstream() -> Iterator[tuple[str, int]]:
    """Every request gets the bomb. Yields the URL and the number of body bytes sent."""
    head, block = gzip_bomb()
    repeats = INFLATED // BLOCK
    status = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
    with fixed_upstream(status, itertools.chain([head], itertools.repeat(block, repeats))) as url:
        yield url, len(head) + repeats * len(block)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


@pytest.mark.slow
def test_a_gzip_bomb_passes_whole_and_the_recording_process_stays_small(
    tmp_path: Path, confdir: Path, bomb_upstream: tuple[str, int]
) -> None:
    url, body_size = bomb_upstream
    db = tmp_path / "tape.db"
    proc = start_ssetape(
        ["record", "--db", str(db), "--port", "0", "--confdir", str(confdir),
         "--mode", f"reverse:{url}"],
        db=str(db),
    )  # fmt: skip
    try:
        [worker] = children(proc.proc.pid)
        received = 0
        with httpx.stream("POST", proc.url + "/v1/chat/completions", timeout=60) as r:
            assert r.headers["content-encoding"] == "gzip"
            for data in r.iter_raw():
                received += len(data)
        assert received == body_size  # every wire byte, as sent
        worker_peak = peak_rss(worker)
        proxy_peak = peak_rss(proc.proc.pid)
    finally:
        assert proc.stop() == 0, proc.log.decode()
    print(f"peak RSS: recording process {worker_peak >> 20} MiB, proxy {proxy_peak >> 20} MiB")
    assert worker_peak < WORKER_PEAK, f"recording process peaked at {worker_peak >> 20} MiB"
    assert proxy_peak < PROXY_PEAK, f"the proxy peaked at {proxy_peak >> 20} MiB"
    with Store.open(str(db), create=False) as store:
        [x] = Queries(store).exchanges()
        assert [e.data for e in Queries(store).events(x.id)] == ["1"]
        assert x.error is not None and "decoded past" in x.error
        stored = sum(len(c.data) for c in Queries(store).chunks(x.id))  # replay sends these
    if stored != body_size:
        # A loaded machine: the recording process fell behind the link's bound, which drops
        # chunks rather than grow. Never silently: the exchange says how many bytes it lacks.
        said = re.search(r"(\d+) bytes not recorded", x.error)
        assert said and stored + int(said.group(1)) == body_size, (stored, x.error)
