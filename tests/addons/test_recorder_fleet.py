"""A fleet: two real `ssetape record` processes write to one PostgreSQL at the same time,
50 concurrent streams each. Every event of every stream is stored once."""

from __future__ import annotations

import asyncio
import threading

import httpx
import orjson
from sqlalchemy import func, select

from ssetape.framing.sse import SseParser
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Event
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, pg_schema
from tests.conftest import Proc

STREAMS = 50  # per recorder


def request(i: int) -> bytes:
    return orjson.dumps(
        {
            "model": "sim-chat",
            "stream": True,
            "max_tokens": 30,
            "messages": [{"role": "user", "content": f"fleet stream {i}"}],
        }
    )


async def one(client: httpx.AsyncClient, base: str, i: int) -> tuple[bytes, bytes]:
    async with client.stream("POST", base + "/v1/chat/completions", content=request(i)) as r:
        assert r.status_code == 200
        return request(i), b"".join([chunk async for chunk in r.aiter_raw()])


async def all_streams(bases: list[str]) -> dict[bytes, bytes]:
    limits = httpx.Limits(max_connections=len(bases) * STREAMS)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        jobs = [one(client, base, n * STREAMS + i) for n, base in enumerate(bases)
                for i in range(STREAMS)]  # fmt: skip
        return dict(await asyncio.gather(*jobs))


def test_two_recorders_one_postgresql_every_event_once(
    sim: Simulator, recorders: Recorders
) -> None:
    with pg_schema() as url:
        # Started together: both migrate the empty schema at once (an advisory lock).
        procs: list[Proc] = []
        starts = [
            threading.Thread(
                target=lambda: procs.append(recorders.start(url, "--mode", f"reverse:{sim.url}"))
            )
            for _ in range(2)
        ]
        for t in starts:
            t.start()
        for t in starts:
            t.join()
        assert len(procs) == 2
        got = asyncio.run(all_streams([p.url for p in procs]))
        for p in procs:
            assert p.stop() == 0, p.log.decode()

        store = Store.open(url, create=False)
        try:
            rows = Queries(store).exchanges()
            assert len(rows) == 2 * STREAMS
            assert {x.request_body for x in rows} == set(got)  # one exchange per request
            per_recorder: dict[str, int] = {}
            total = 0
            for x in rows:
                assert x.state == "completed" and x.recorder is not None
                per_recorder[x.recorder] = per_recorder.get(x.recorder, 0) + 1
                events = list(Queries(store).events(x.id))
                body = got[x.request_body]  # type: ignore[index]
                assert b"".join(e.raw for e in events) == body
                assert [e.seq for e in events] == list(range(len(events)))
                parser = SseParser()
                assert len(events) == len(parser.feed(body)) + len(parser.close())
                assert x.event_count == len(events)
                total += len(events)
            assert sorted(per_recorder.values()) == [STREAMS, STREAMS]
            with store.Session() as s:
                assert s.scalar(select(func.count()).select_from(Event)) == total
            totals = Runs(store).totals()
            assert [r["status"] for r in totals["runs"]] == ["stopped", "stopped"]
            assert totals["events_recorded"] == total and totals["events_lost"] == 0
            assert totals["exchanges_recorded"] == 2 * STREAMS
        finally:
            store.close()
