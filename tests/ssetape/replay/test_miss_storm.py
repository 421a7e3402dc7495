"""Misses do not hold timed streams back: on a tape of 10,000 recordings, `ssetape replay`
plays a stream on time while bursts of requests that match nothing pour in, each answered
with its nearest recordings, and a burst of 100 misses is answered in well under a second
(it took 12.6 s when every miss compared itself with the whole tape on the loop)."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import orjson
import pytest

from bench.bench_miss_storm import storm, timed_errors
from bench.bench_replay import fetch, pct
from bench.tapes import build_tape, chat_body
from tests.conftest import Proc, start_ssetape


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes, list[int]]:
    db = str(tmp_path_factory.mktemp("storm") / "tape.db")
    body, offsets = build_tape(db, exchanges=10_000, events=50, gap_us=20_000)
    return db, body, offsets


def replaying(db: str) -> tuple[Proc, int]:
    """`ssetape replay` of the tape (the direct server) and its port."""
    proc = start_ssetape(
        ["replay", "--db", db, "--port", "0", "--mode", "reverse:https://api.example.test"],
        db=db,
    )
    return proc, int(proc.url.rsplit(":", 1)[1])


@pytest.mark.slow
def test_timed_events_stay_on_time_while_misses_pour_in(
    tape: tuple[str, bytes, list[int]], confdir: Path
) -> None:
    db, body, offsets = tape
    proc, port = replaying(db)
    # Another test may share the two cores (-n 2 beside a test that runs mitmproxy, an
    # upstream and a client): its load moves the tail of any window, whatever replay does
    # (p95 5-19 ms seen so), never the median. Before the change every window had p50 20 ms,
    # p95 33 ms, max 307 ms; on a quiet machine p95 is about 3 ms (bench.bench_miss_storm,
    # docs/BENCHMARKS.md). So: the median of one of a few windows, and its worst event.
    windows: list[str] = []
    try:
        timed_errors(port, body, offsets, 1)  # warm
        for _ in range(4):
            with storm(port, 30, 100, 3) as p:
                errors = timed_errors(port, body, offsets, 2)
            answered = p.stdout.read().split() if p.stdout else []
            assert p.returncode == 0 and len(answered) == 3  # every storm request missed
            assert float(answered[0]) > 80  # misses a second: answered, not queued
            p50, p95 = statistics.median(errors), pct(errors, 0.95)
            top = max(errors)
            windows.append(f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {top:.1f} ms")
            if p50 < 2 and top < 100:
                break
    finally:
        assert proc.stop() == 0, proc.log.decode()
    assert p50 < 2 and top < 100, "; ".join(windows)
    assert "Traceback" not in proc.log.decode()


@pytest.mark.slow
def test_a_burst_of_100_misses_is_answered_at_once_with_the_nearest_recordings(
    tape: tuple[str, bytes, list[int]], confdir: Path
) -> None:
    db, _, _ = tape
    proc, port = replaying(db)

    async def burst() -> list[tuple[float, bytes]]:
        async def one(n: int) -> tuple[float, bytes]:
            t0 = time.perf_counter()
            # Recording n with one field more: it is nearer than any other recording.
            asked = {**orjson.loads(chat_body(f"tape {n}", stream=True)), "temperature": 0.5}
            _, _, answer, _ = await fetch(port, orjson.dumps(asked))
            return time.perf_counter() - t0, answer

        return await asyncio.gather(*(one(n) for n in range(9_900, 10_000)))

    try:
        results = asyncio.run(burst())
    finally:
        assert proc.stop() == 0, proc.log.decode()
    took = [t for t, _ in results]
    assert max(took) < 2.0, f"slowest miss {max(took):.2f} s, median {statistics.median(took):.2f}"
    # Each names the recording it nearly is, and how it differs.
    for n, (_, answer) in enumerate(results, start=9_900):
        error = orjson.loads(answer)["error"]
        assert error["type"] == "ssetape_replay_miss"
        [nearest, *_] = error["nearest"]
        assert nearest["differences"] == [
            {"field": "body.temperature", "recorded": "<absent>", "requested": 0.5}
        ], n
        assert nearest["id"] == n + 1  # "tape n" is the tape's exchange n + 1
