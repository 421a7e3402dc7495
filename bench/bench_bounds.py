"""Issue 39's memory bounds in one run, each figure beside its bound: PASS or FAIL.

    python -m bench.bench_bounds [--response-mib 300] [--live-clients 400] [--body-mib 100]
                                 [--export-events 1000000] [--tool-calls 200000]

Each is measured by the bench that measures it alone (its text says how), in this order:

- ``bench.bench_tool_calls``: MCP ``get_exchange`` of a stream that opens ``--tool-calls``
  tool calls (through the official SDK's client in memory): its structured content and its
  text, each under 64 KB;
- ``bench.bench_read_paths``: `ssetape export --id` (a cassette, to standard output) of a
  stream of ``--export-events`` events, the command's peak RSS under 150 MB;
- ``bench.bench_web --live-clients``: ``--live-clients`` clients of `ssetape web`'s live feed
  at once, on a store holding a ``--body-mib`` MiB body: the viewer's peak RSS under 300 MB,
  every list page timed meanwhile under 1 s, every client answered (a 200 or a 503);
- ``bench.bench_big_body``: a ``--response-mib`` MiB ``application/json`` response with a
  ``content-length`` through `ssetape record` (reverse proxy, SQLite): the proxy's and its
  recording process's peak RSS each under 200 MB, the client's copy intact.

Memory is in MB (10^6 bytes), as the issue states its bounds. The exit status is 1 when a
figure is past its bound.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import bench_big_body, bench_read_paths, bench_tool_calls, bench_web
from bench.bench_memory import ssetape_cmd
from bench.bench_record import BIN, free_port, wait_port
from bench.tapes import build_stream
from ssetape.storage.store import Store

MB_PER_MIB = 2**20 / 1e6


@dataclass
class Row:
    what: str
    figure: float
    bound: float
    unit: str

    @property
    def ok(self) -> bool:
        return self.figure < self.bound

    def line(self) -> str:
        verdict = "PASS" if self.ok else "FAIL"
        if not self.unit:  # a count of failures: none allowed
            return f"| {self.what} | {self.figure:.0f} | 0 | {verdict} |"
        fig = f"{self.figure:,.0f}" if self.figure >= 10 else f"{self.figure:.1f}"
        return f"| {self.what} | {fig} {self.unit} | < {self.bound:,.0f} {self.unit} | {verdict} |"


def mcp_rows(tmp: str, calls: int) -> list[Row]:
    with Store.open(f"{tmp}/calls.db") as store:
        xid = bench_tool_calls.tool_call_stream(store, calls)
        struct, text, _ = bench_tool_calls.mcp_answer(store, xid)
    what = f"MCP get_exchange of {calls:,} tool calls"
    return [Row(f"{what}: structured content", struct / 1e3, 64, "KB"),
            Row(f"{what}: text content", text / 1e3, 64, "KB")]  # fmt: skip


def export_rows(tmp: str, events: int) -> list[Row]:
    db = f"{tmp}/long.db"
    xid = build_stream(db, events=events)
    cmd = [str(BIN / "ssetape"), "export", "--id", str(xid), "-o", "-", "--db", db]
    _, took, peak = bench_read_paths.run(cmd)
    what = f"`ssetape export --id` of a {events:,}-event stream ({took:.0f} s): peak RSS"
    return [Row(what, peak * MB_PER_MIB, 150, "MB")]


def live_rows(tmp: str, clients: int, body_mib: int) -> list[Row]:
    args = argparse.Namespace(live_clients=clients, body_mib=body_mib, max_live=None,
                              exchanges=1000, rounds=7)  # fmt: skip
    peak, took, answers = bench_web.live_viewers(args, f"{tmp}/web.db")
    answered = answers.get("200", 0) + answers.get("503", 0)
    what = f"{clients} live viewer clients, a {body_mib} MiB body in the store"
    return [Row(f"{what}: viewer peak RSS", peak * MB_PER_MIB, 300, "MB"),
            Row(f"{what}: slowest of {len(took)} list pages", max(took), 1000, "ms"),
            Row(f"{what}: clients not answered 200 or 503", clients - answered, 1, "")]  # fmt: skip


def big_body_rows(tmp: str, mib: int) -> list[Row]:
    up_port, port = free_port(), free_port()
    upstream = multiprocessing.Process(
        target=bench_big_body.serve, args=(up_port, mib, False), daemon=True
    )
    upstream.start()
    try:
        wait_port(up_port)
        up, sha = f"http://127.0.0.1:{up_port}", bench_big_body.body_sha(mib)
        cmd = ssetape_cmd(up, port, f"{tmp}/big.db", f"{tmp}/conf")
        r = bench_big_body.run("ssetape record", cmd, port, tmp, mib, sha)
    finally:
        upstream.terminate()
    what = f"{mib} MiB non-streamed response through `ssetape record` ({r.seconds:.0f} s)"
    return [Row(f"{what}: proxy peak RSS", r.proxy_peak * MB_PER_MIB, 200, "MB"),
            Row(f"{what}: recording process peak RSS",
                (r.recording_peak or 0.0) * MB_PER_MIB, 200, "MB"),
            Row(f"{what}: client's copy not intact", 0 if r.intact else 1, 1, "")]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--response-mib", type=int, default=300)
    ap.add_argument("--live-clients", type=int, default=400)
    ap.add_argument("--body-mib", type=int, default=100, help="the body in the viewer's store")
    ap.add_argument("--export-events", type=int, default=1_000_000)
    ap.add_argument("--tool-calls", type=int, default=200_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ssetape-bench-bounds-") as tmp:
        Path(f"{tmp}/conf").mkdir()
        rows = mcp_rows(tmp, args.tool_calls)
        rows += export_rows(tmp, args.export_events)
        rows += live_rows(tmp, args.live_clients, args.body_mib)
        rows += big_body_rows(tmp, args.response_mib)
    print(f"\nPython {sys.version.split()[0]}\n")
    print("| measured | figure | bound | |\n|---|---|---|---|")
    for row in rows:
        print(row.line())
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
