"""The viewer's routes: pages, a timeline, the play button's text, a whole event, downloads,
the live streams (:mod:`ssetape.web.live`) and the assets.

Read-only: every route is a GET. Pages are rendered in Starlette's thread pool (the store is
read with blocking drivers). Every response carries a strict Content-Security-Policy: the
page's own script and stylesheet only, no inline script, nothing from elsewhere.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from importlib.resources import files
from typing import IO

import anyio
import orjson
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ssetape.cassettes.har import Har
from ssetape.cassettes.store_io import write_cassette
from ssetape.storage.models import Exchange
from ssetape.storage.page_reads import PageReads
from ssetape.storage.queries import Queries
from ssetape.views.timeline import Timeline
from ssetape.views.timeline_svg import TimelineSvg
from ssetape.web.compare_page import ComparePage
from ssetape.web.exchange_page import ZOOMS, ExchangePage
from ssetape.web.html import el, id_of, link, page
from ssetape.web.list_page import ListView
from ssetape.web.live import WATCH_MAX, events_stream, exchanges_stream
from ssetape.web.live_clients import MAX_LIVE, LiveClients
from ssetape.web.playback import pieces
from ssetape.web.session_page import SessionPage
from ssetape.web.stats_page import StatsView
from ssetape.web.waiting_store import WaitingStore

__all__ = ["CSP", "create_app"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
# A download is written to a spooled file first (in memory up to this, then on disk), so a
# long stream is neither held whole nor read under an open response.
_SPOOL_BYTES = 8 * 1024 * 1024
# The exchange page's timeline at zoom 1: the width of its column on a laptop screen.
_TIMELINE_PX = 1100
_ASSETS = {
    "app.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


class _SecurityHeaders:
    """Adds the policy headers to every response, streamed ones too (plain ASGI, so a
    Server-Sent Events stream is not buffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)


# Loopback as a browser names it: a page on another site that points its own name at
# 127.0.0.1 (DNS rebinding) sends that name in Host and is refused, so it cannot read the store.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def create_app(
    store: Queries | WaitingStore, hosts: Sequence[str] | None = None, *,
    live_clients: LiveClients | None = None,
) -> ASGIApp:  # fmt: skip
    """The viewer of a store, or of one a recorder has not created yet (its list is empty
    and fills live once it exists); ``hosts``: the only Host names it answers (None: any, as
    for a viewer that listens beyond loopback, where the user chose who may reach it);
    ``live_clients``: its live streams (at most :data:`MAX_LIVE` at once unless told so)."""
    clients = live_clients if live_clients is not None else LiveClients(MAX_LIVE)
    assets = {
        name: (files("ssetape.web").joinpath("static", name).read_bytes(), kind)
        for name, kind in _ASSETS.items()
    }

    def not_found(what: str) -> HTMLResponse:
        return HTMLResponse(page("ssetape: not found", el("h1", what)), status_code=404)

    def current() -> Queries | None:
        return store if isinstance(store, Queries) else store.queries()

    def reads(route: Callable[[Request, Queries], Response]) -> Callable[[Request], Response]:
        """A page of the store: "nothing recorded yet" while there is none."""

        def answer(request: Request) -> Response:
            queries = current()
            if queries is None:
                assert isinstance(store, WaitingStore)
                return not_found(f"nothing recorded yet in {store.path}")
            return route(request, queries)

        return answer

    def exchange_of(
        request: Request, queries: Queries, *, timeline: bool = False
    ) -> Exchange | None:
        key: str = request.path_params["key"]
        # Without its bodies: a page reads them cut, if it shows them (ExchangePage.bodies).
        # A timeline reads the request's (the analysis does: what counted as content).
        one = key if (n := id_of(key)) is None else n
        return PageReads(queries.store).exchange(one, request_body=timeline)

    def index(request: Request) -> Response:
        view = ListView.parse(request.query_params)
        if view.refused is not None:
            # A sort or cursor it cannot read: named, with the choices, as `ssetape list` does.
            refused = el("p", view.refused, class_="error", id="filter-error")
            return HTMLResponse(page("ssetape: bad request", el("h1", "Exchanges"), refused,
                                     link("/", "all exchanges, newest first")),
                                status_code=400)  # fmt: skip
        queries = current()
        if queries is None:
            assert isinstance(store, WaitingStore)
            return HTMLResponse(view.render_waiting(store.path, store.problem))
        return HTMLResponse(view.render(queries))

    def exchange(request: Request, queries: Queries) -> Response:
        x = exchange_of(request, queries)
        if x is None:
            return not_found(f"no exchange {request.path_params['key']}")
        after = request.query_params.get("after", "")
        return HTMLResponse(ExchangePage(x, queries, after=-1 if (n := id_of(after)) is None else n)
                            .render())  # fmt: skip

    def stats(request: Request, queries: Queries) -> Response:
        return HTMLResponse(StatsView.parse(request.query_params).render(queries))

    def compare(request: Request, queries: Queries) -> Response:
        status, html = ComparePage(request.query_params, queries).render()
        return HTMLResponse(html, status_code=status)

    def session(request: Request, queries: Queries) -> Response:
        # {name:path}: a session name may hold slashes (a pytest node id); the link quotes it.
        after = id_of(request.query_params.get("after", ""))
        status, html = SessionPage(request.path_params["name"], queries, after=after).render()
        return HTMLResponse(html, status_code=status)

    def play(request: Request, queries: Queries) -> Response:
        x = exchange_of(request, queries)
        if x is None:
            return not_found("no such exchange")
        return Response(orjson.dumps(pieces(x, queries)), media_type="application/json")

    def event(request: Request, queries: Queries) -> Response:
        x = exchange_of(request, queries)
        seq = id_of(request.path_params["seq"])  # not {seq:int}: 5,000 digits are no int
        found = (
            queries.events_page(x.id, after_seq=seq - 1, limit=1) if x and seq is not None else []
        )
        if not found or found[0].seq != seq:
            return not_found("no such event")
        # The whole event as it was sent, as plain text (bytes, when they are not text: an
        # AWS event-stream frame): never rendered as a page.
        raw = found[0].raw
        try:
            raw.decode("utf-8")
            media = "text/plain; charset=utf-8"
        except UnicodeDecodeError:
            media = "application/octet-stream"
        return Response(raw, media_type=media)

    def timeline(request: Request, queries: Queries) -> Response:
        x = exchange_of(request, queries, timeline=True)
        if x is None:
            return not_found("no such exchange")
        # An SVG element for the page to insert; TimelineSvg escapes every string it draws.
        # Zoomed, it is drawn wider (the page scrolls it): marks spread, text keeps its size.
        zoom = _int(request.query_params.get("zoom"), 1)
        width = _TIMELINE_PX * (zoom if zoom in ZOOMS else 1)
        return Response(_svg(x, queries, width_px=width), media_type="text/html; charset=utf-8")

    def download(request: Request, queries: Queries) -> Response:
        x = exchange_of(request, queries, timeline=True)
        kind = _DOWNLOADS.get(request.path_params["kind"])
        if x is None or kind is None:
            return not_found("no such download")
        name, media_type = kind
        only = queries.only(x.id)
        writers: dict[str, Callable[[IO[bytes]], object]] = {
            "cassette.jsonl": lambda out: write_cassette(queries.store, out, only),
            "exchange.har": lambda out: Har(queries.store).write(out, only),
            "timeline.svg": lambda out: out.write(_svg(x, queries).encode()),
        }
        # Closed by _chunks once sent (or by the collector if the client left first).
        spool = tempfile.SpooledTemporaryFile(_SPOOL_BYTES)  # noqa: SIM115
        try:
            writers[name](spool)
        except BaseException:
            spool.close()
            raise
        size = spool.tell()
        spool.seek(0)
        return StreamingResponse(
            _chunks(spool),
            media_type=media_type,
            headers={
                "content-disposition": f'attachment; filename="ssetape-{x.id}-{name}"',
                "content-length": str(size),
            },
        )

    def asset(request: Request) -> Response:
        found = assets.get(request.path_params["name"])
        if found is None:
            return not_found("no such file")
        return Response(found[0], media_type=found[1], headers={"cache-control": "no-cache"})

    async def live(request: Request) -> Response:
        if clients.full():
            return clients.refused()
        view = ListView.parse(request.query_params)
        after = _int(request.headers.get("last-event-id") or request.query_params.get("after"))
        watch = {
            n for i in request.query_params.get("watch", "").split(",")[:WATCH_MAX]
            if (n := id_of(i)) is not None
        }  # fmt: skip
        return clients.respond(exchanges_stream(current, view, after, watch))

    async def live_events(request: Request) -> Response:
        if clients.full():  # before any read
            return clients.refused()
        queries = await anyio.to_thread.run_sync(current)
        x = (
            None
            if queries is None
            else await anyio.to_thread.run_sync(exchange_of, request, queries)
        )
        if queries is None or x is None:
            return not_found("no such exchange")
        args = request.query_params
        after = _int(request.headers.get("last-event-id") or args.get("after"), -1)
        offset = _int(args.get("offset"), -1)
        start = _int(args.get("start"), -1)
        stream = events_stream(queries, x.id, after, None if offset < 0 else offset, start)
        return clients.respond(stream)

    routes = [
        Route("/", index),
        Route("/live", live),
        Route("/stats", reads(stats)),
        Route("/compare", reads(compare)),
        Route("/session/{name:path}", reads(session)),
        Route("/exchanges/{key}/live", live_events),
        Route("/exchanges/{key}", reads(exchange)),
        Route("/exchanges/{key}/play", reads(play)),
        Route("/exchanges/{key}/timeline", reads(timeline)),
        Route("/exchanges/{key}/events/{seq}", reads(event)),
        Route("/exchanges/{key}/download/{kind}", reads(download)),
        Route("/static/{name}", asset),
    ]
    app: ASGIApp = Starlette(routes=routes)
    if hosts is not None:
        app = TrustedHostMiddleware(app, allowed_hosts=list(hosts))
    return _SecurityHeaders(app)


# URL name -> (file name, media type)
_DOWNLOADS = {
    "cassette": ("cassette.jsonl", "application/x-ndjson"),
    "har": ("exchange.har", "application/json"),
    "svg": ("timeline.svg", "image/svg+xml"),
}


def _svg(x: Exchange, queries: Queries, width_px: int = 900) -> str:
    return TimelineSvg(Timeline.of(x, queries)).render(width_px=width_px)


def _chunks(spool: IO[bytes]) -> Iterator[bytes]:
    with spool:
        while data := spool.read(1024 * 1024):
            yield data


def _int(text: str | None, default: int = 0) -> int:
    """A number from a URL, or ``default``: also for one no column holds (past 64 bits; int()
    refuses 5,000 digits itself)."""
    try:
        n = int(text or "")
    except ValueError:
        return default
    return n if -(2**63) <= n < 2**63 else default
