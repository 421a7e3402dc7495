"""What one stream of many tool calls, and one huge body, cost the readers of a store.

    python -m bench.bench_tool_calls [--calls 50000 200000] [--body-mib 100]

For each count, a recorded chat completions stream that opens that many tool calls (one
chunk each, as OpenAI streams parallel calls) is written into a SQLite store the way
`bench.tapes` writes one, then analysed by ``analysis.knowledge`` (as `ssetape reindex`
does). Measured: the stored knowledge (its ``details``), the MCP ``get_exchange`` answer
(structured content and text, through the official SDK's client in memory), and the output
of `ssetape show --json` and `--json --full`. Then an exchange whose response body is
``--body-mib`` MiB: the peak memory of a process that answers ``get_exchange`` for it, the
body read cut by the store (``storage.exchange_heads``), beside one that reads the exchange
whole first (``Queries.exchange``, as it was read before), each in a fresh process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import anyio
import orjson
from sqlalchemy import Table, insert

from ssetape.analysis.knowledge import Knowledge
from ssetape.mcp_server.server import build
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

BIN = Path(sys.executable).parent
PATH = "/v1/chat/completions"


def _exchange(**columns: Any) -> dict[str, Any]:
    body = b'{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"go"}]}'
    return {
        "uid": secrets.token_hex(16), "started_at": dt.datetime.now(dt.UTC), "method": "POST",
        "scheme": "https", "host": "api.openai.com", "port": 443, "path": PATH, "query": "",
        "http_version": "HTTP/1.1", "request_headers": [["content-type", "application/json"]],
        "request_body": body, "fingerprint": secrets.token_hex(32), "status": 200,
        "reason": "OK", "response_headers": [["content-type", "text/event-stream"]],
        "is_stream": True, "state": "completed", "ttfb_us": 1000, "duration_us": 10**6,
        **columns,
    }  # fmt: skip


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return orjson.dumps({"model": "gpt-4o-mini", "choices": [choice]}).decode()


def tool_call_datas(calls: int) -> list[str]:
    """The events' data of a chat stream that opens ``calls`` tool calls, ``f(i=N)``."""
    datas = [_chunk({"role": "assistant"})]
    for i in range(calls):
        fn = {"name": "f", "arguments": f'{{"i":{i}}}'}
        call = {"index": i, "id": f"call_{i}", "type": "function", "function": fn}
        datas.append(_chunk({"tool_calls": [call]}))
    return [*datas, _chunk({}, "tool_calls"), "[DONE]"]


def tool_call_stream(store: Store, calls: int) -> int:
    """A recorded stream of ``calls`` tool calls in ``store``, analysed; its id."""
    datas = tool_call_datas(calls)
    exchanges_t, events_t = cast(Table, Exchange.__table__), cast(Table, Event.__table__)
    with store.engine.begin() as conn:
        row = _exchange(event_count=len(datas))
        xid = int(conn.execute(insert(exchanges_t).returning(exchanges_t.c.id), row).scalar_one())
        for start in range(0, len(datas), 20_000):
            conn.execute(insert(events_t), [
                {"exchange_id": xid, "seq": i, "offset_us": 2000 + i, "event": None, "data": d,
                 "raw": f"data: {d}\n\n".encode()}
                for i, d in enumerate(datas[start : start + 20_000], start)
            ])  # fmt: skip
    Knowledge(store).update([xid])
    return xid


def big_body(store: Store, mib: int) -> int:
    """A non-stream exchange whose response body is ``mib`` MiB of JSON; its id."""
    body = b'{"data":"' + b"x" * ((mib << 20) - 11) + b'"}'
    exchanges_t = cast(Table, Exchange.__table__)
    row = _exchange(is_stream=False, response_body=body,
                    response_headers=[["content-type", "application/json"]])  # fmt: skip
    with store.engine.begin() as conn:
        return int(conn.execute(insert(exchanges_t).returning(exchanges_t.c.id), row).scalar_one())


def mcp_answer(store: Store, xid: int) -> tuple[int, int, float]:
    """Bytes of ``get_exchange``'s structured content and of its text, and seconds taken."""
    from mcp.shared.memory import create_connected_server_and_client_session

    async def main() -> tuple[int, int, float]:
        async with create_connected_server_and_client_session(build(store)) as client:
            t = time.perf_counter()
            result = await client.call_tool("get_exchange", {"id": xid})
            took = time.perf_counter() - t
        assert not result.isError, result.content
        text = result.content[0].text  # type: ignore[union-attr]
        return len(orjson.dumps(result.structuredContent)), len(text.encode()), took

    return anyio.run(main)


def show_bytes(db: str, xid: int, *more: str) -> int:
    out = subprocess.run([str(BIN / "ssetape"), "show", str(xid), "--db", db, "--json", *more],
                         capture_output=True, check=True).stdout  # fmt: skip
    return len(out)


def _peak(db: str, xid: int, cut: bool, out: Any) -> None:
    """In a fresh process: get_exchange of ``xid``, the body read cut or whole; peak RSS."""
    from ssetape.mcp_server import exchanges
    from ssetape.mcp_server.texts import text
    from ssetape.storage.queries import Queries

    with Store.open(db) as store:
        queries = Queries(store)
        exchanges.get_exchange(queries, 1)  # a first read: what it costs once is not the body
        Path("/proc/self/clear_refs").write_text("5")  # the peak, from now
        base = _hwm()
        if cut:
            doc = exchanges.get_exchange(queries, xid)
        else:  # as before: the exchange read whole, then its texts cut
            x = exchanges.lookup(queries, xid)
            doc = {"body": text(x.response_body), **exchanges.get_exchange(queries, xid)}
        peak = _hwm()
    out.put(((peak - base) / 1024, len(orjson.dumps(doc))))


def _hwm() -> int:
    """Peak resident memory of this process, KiB."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def peak_of(db: str, xid: int, cut: bool) -> tuple[float, int]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_peak, args=(db, xid, cut, out))
    p.start()
    got: tuple[float, int] = out.get(timeout=300)
    p.join()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, nargs="+", default=[50_000, 200_000])
    ap.add_argument("--body-mib", type=int, default=100)
    args = ap.parse_args()
    print("calls      analyse  details   mcp struct  mcp text  mcp time  show --json  --full")
    with tempfile.TemporaryDirectory() as tmp:
        for calls in args.calls:
            db = f"{tmp}/calls{calls}.db"
            with Store.open(db) as store:
                t = time.perf_counter()
                xid = tool_call_stream(store, calls)
                took = time.perf_counter() - t
                x = Queries(store).exchange(xid)
                assert x is not None and x.details is not None
                details = len(orjson.dumps(x.details))
                total = x.details["tool_calls_total"]
                assert total == calls, total
                struct, text, answer_s = mcp_answer(store, xid)
            shown, full = show_bytes(db, xid), show_bytes(db, xid, "--full")
            print(f"{calls:<9,}  {took:6.1f} s  {details / 1e3:6.1f} KB  {struct / 1e3:7.1f} KB"
                  f"  {text / 1e3:6.1f} KB  {answer_s:6.3f} s  {shown / 1e6:8.2f} MB"
                  f"  {full / 1e6:6.2f} MB")  # fmt: skip
        db = f"{tmp}/body.db"
        with Store.open(db) as store:
            xid = big_body(store, args.body_mib)
        for cut in (True, False):
            peak, size = peak_of(db, xid, cut)
            how = "read cut (storage.exchange_heads)" if cut else "read whole (Queries.exchange)"
            print(f"get_exchange of a {args.body_mib} MiB body, {how}: peak +{peak:.0f} MiB, "
                  f"answer {size / 1e3:.1f} KB")  # fmt: skip


if __name__ == "__main__":
    main()
