"""`ssetape demo`: record a few streams from the built-in simulator and show what was stored."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table

from ssetape.addons.recorder import Recorder
from ssetape.addons.replayer import Replayer
from ssetape.analysis.knowledge import Knowledge
from ssetape.analysis.stats import Stats
from ssetape.framing.sse import SseParser
from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.simulator.simulator import Simulator
from ssetape.storage.filters import Filters
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.views.tables import list_table, show_view, stats_table

# Real model names, so that the demo shows prices (the simulator answers any model; its host
# is no provider's, so each is priced at its maker's rates, and `show` says so).
REQUESTS: list[tuple[str, str, dict[str, object]]] = [
    (
        "chat completions",
        "/v1/chat/completions",
        {
            "model": "gpt-4o-mini",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Say hello to ssetape"}],
        },
    ),
    ("responses", "/v1/responses", {"model": "gpt-4.1-mini", "stream": True, "input": "Hello"}),
    (
        "messages",
        "/v1/messages",
        {
            "model": "claude-3-5-haiku-20241022",
            "stream": True,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Hello from the demo"}],
        },
    ),
    (
        "images",
        "/v1/images/generations",
        {
            "model": "gpt-image-1",
            "stream": True,
            "partial_images": 2,
            "prompt": "a tape",
        },
    ),
    (
        "error after start",
        "/v1/chat/completions",
        {
            "model": "gpt-4o-mini-sim-error",
            "stream": True,
            "messages": [{"role": "user", "content": "This one fails mid-stream"}],
        },
    ),
]


async def _timed(client: httpx.AsyncClient, path: str, body: dict[str, object]) -> list[float]:
    """Arrival time of each SSE block, in seconds after the request was sent."""
    parser, times = SseParser(), []
    t0 = time.perf_counter()
    headers = {"authorization": "Bearer sk-demo-not-a-real-key"}
    async with client.stream("POST", path, json=body, headers=headers) as r:
        async for chunk in r.aiter_raw():
            times += [time.perf_counter() - t0] * len(parser.feed(chunk))
    return times + [time.perf_counter() - t0] * len(parser.close())


async def _through_proxy(
    addons: list[Any], db: str, sim_url: str
) -> list[tuple[str, str, list[float]]]:
    """Send every demo request through a proxy with these addons; the arrival times."""
    ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    runner = ProxyRunner(
        addons,
        mode=f"reverse:{sim_url}",
        port=0,
        options={"ssetape_db": db},
        on_ready=lambda h, p: ready.set_result((h, p)),
    )
    task = asyncio.ensure_future(runner.run())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
    if task.done():
        task.result()
        return []
    host, port = ready.result()
    out = []
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
        for label, path, body in REQUESTS:
            out.append((label, path, await _timed(client, path, body)))
    await runner.idle()
    runner.shutdown()
    await task
    return out


def _fidelity(store: Store, replayed: list[tuple[str, str, list[float]]]) -> Table:
    t = Table(title="recorded vs replayed (ms)", title_justify="left", box=None)
    for col in ("stream", "events", "first event rec", "first event replay", "gap err mean",
                "gap err max"):  # fmt: skip
        t.add_column(col, justify="left" if col == "stream" else "right")
    queries = Queries(store)
    rows = sorted(queries.exchanges(), key=lambda x: x.id)
    for x, (label, _, times) in zip(rows, replayed, strict=False):
        rec = [e.offset_us / 1000 for e in queries.events(x.id)]
        got = [v * 1000 for v in times]
        n = min(len(rec), len(got))
        errs = [abs((got[i] - got[i - 1]) - (rec[i] - rec[i - 1])) for i in range(1, n)]
        t.add_row(
            label, f"{len(got)}/{len(rec)}", f"{rec[0]:.1f}" if rec else "-",
            f"{got[0]:.1f}" if got else "-",
            f"{sum(errs) / len(errs):.2f}" if errs else "-", f"{max(errs):.2f}" if errs else "-",
        )  # fmt: skip
    return t


@click.command()
@click.option("--db", default=None, help="Keep the recording in this database (default: temp).")
def demo(db: str | None) -> None:
    """Record a few streams from the built-in simulator, show them, and replay them."""
    console = Console()
    with tempfile.TemporaryDirectory(prefix="ssetape-demo-") as tmp:
        target = db or str(Path(tmp) / "demo.db")
        with Simulator(speed=2.0).serve_in_thread() as sim:
            console.print(f"simulated API at {sim.url}; recording through ssetape to {target}")
            try:
                recorded = asyncio.run(_through_proxy([Recorder()], target, sim.url))
            except ProxyStartError as e:
                raise click.ClickException(str(e)) from None
            sim_url = sim.url
        for label, path, times in recorded:
            console.print(f"recorded [bold]{label}[/] ({path}): {len(times)} events")
        store = Store.open(target, create=False)
        try:
            queries = Queries(store)
            rows = queries.exchanges()
            console.print(list_table(rows))
            first = rows[-1]
            events = list(queries.events(first.id))
            console.print(show_view(first, events, Knowledge(store).findings(first.id)))
            console.print(stats_table(Stats(store).groups("api", Filters()), "api"))
            console.print(f"\nsimulator stopped; replaying {len(rows)} streams from the tape")
            replayed = asyncio.run(_through_proxy([Replayer(), Recorder()], target, sim_url))
            console.print(_fidelity(store, replayed))
        finally:
            store.close()
        console.print(
            f"[bold]{len(rows)}[/] exchanges recorded and replayed. Try: ssetape record --port "
            "8080 --web, then open the viewer it prints (or ssetape list, show ID --timeline, "
            "stats), and ssetape replay --port 8080."
        )
