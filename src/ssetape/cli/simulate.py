"""`ssetape simulate`: the simulated streaming API, for trying ssetape without a key."""

from __future__ import annotations

import asyncio
import sys

import click

from ssetape.simulator import scenario
from ssetape.simulator.simulator import Simulator


@click.command()
@click.option("--port", default=9000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Divide every delay by this.",
)
@click.option("--scenarios", is_flag=True, help="Describe the endpoints and scenarios, then exit.")
def simulate(port: int, host: str, speed: float, scenarios: bool) -> None:
    """Serve a simulated OpenAI/Anthropic-style streaming API (no key, no network).

    Scenarios are chosen by keywords in the request's model name (sim-error, sim-cut,
    sim-pause, ...); `ssetape simulate --scenarios` describes them all.
    """
    if scenarios:
        click.echo((scenario.__doc__ or "").strip())
        return

    async def serve() -> None:
        sim = Simulator(host=host, port=port, speed=speed, verbose=True)
        await sim.start()
        click.echo(
            f"ssetape simulate: listening on {sim.url} "
            f"(OpenAI base_url={sim.url}/v1, Anthropic base_url={sim.url})"
        )
        sys.stdout.flush()
        await sim.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None
