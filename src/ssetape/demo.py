"""`ssetape demo`: record a few streams from the built-in simulator and show what was stored."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import click
import httpx
from rich.console import Console

from ssetape.addons.recorder import Recorder
from ssetape.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.storage.store import Store
from ssetape.views import list_table, show_view

REQUESTS: list[tuple[str, str, dict[str, object]]] = [
    (
        "chat completions",
        "/v1/chat/completions",
        {
            "model": "sim-demo",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Say hello to ssetape"}],
        },
    ),
    ("responses", "/v1/responses", {"model": "sim-demo", "stream": True, "input": "Hello"}),
    (
        "messages",
        "/v1/messages",
        {
            "model": "sim-demo",
            "stream": True,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Hello from the demo"}],
        },
    ),
    (
        "images",
        "/v1/images/generations",
        {
            "model": "sim-demo",
            "stream": True,
            "partial_images": 2,
            "prompt": "a tape",
        },
    ),
    (
        "error after start",
        "/v1/chat/completions",
        {
            "model": "sim-error",
            "stream": True,
            "messages": [{"role": "user", "content": "This one fails mid-stream"}],
        },
    ),
]


async def _record(db: str, sim_url: str, console: Console) -> None:
    ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    runner = ProxyRunner(
        [Recorder()],
        mode=f"reverse:{sim_url}",
        port=0,
        options={"ssetape_db": db},
        on_ready=lambda h, p: ready.set_result((h, p)),
    )
    task = asyncio.ensure_future(runner.run())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
    if task.done():
        task.result()
        return
    host, port = ready.result()
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
        for label, path, body in REQUESTS:
            headers = {"authorization": "Bearer sk-demo-not-a-real-key"}
            async with client.stream("POST", path, json=body, headers=headers) as r:
                n = 0
                async for _ in r.aiter_bytes():
                    n += 1
            console.print(f"recorded [bold]{label}[/] ({path}): HTTP {r.status_code}, {n} chunks")
    runner.shutdown()
    await task


@click.command()
@click.option("--db", default=None, help="Keep the recording in this database (default: temp).")
def demo(db: str | None) -> None:
    """Record a few streams from the built-in simulator and show them."""
    from ssetape.simulator import Simulator

    console = Console()
    with tempfile.TemporaryDirectory(prefix="ssetape-demo-") as tmp:
        target = db or str(Path(tmp) / "demo.db")
        with Simulator(speed=2.0).serve_in_thread() as sim:
            console.print(f"simulated API at {sim.url}; recording through ssetape to {target}")
            try:
                asyncio.run(_record(target, sim.url, console))
            except ProxyStartError as e:
                raise click.ClickException(str(e)) from None
        store = Store.open(target, create=False)
        try:
            rows = store.exchanges()
            console.print(list_table(rows))
            first = rows[-1]
            console.print(show_view(first, store.events(first.id)))
        finally:
            store.close()
        console.print(
            f"[bold]{len(rows)}[/] exchanges recorded. Try: ssetape record --port 8080, then "
            "ssetape list / ssetape show ID."
        )
