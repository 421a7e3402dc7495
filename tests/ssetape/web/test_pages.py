"""The viewer's pages as a client reads them (no browser): what they show of a real recording,
escaped; their bounds and paging; the policy headers; read-only; `ssetape web` as a process."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from ssetape.cli.main import main
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web import exchange_page
from ssetape.web.app import CSP, create_app
from ssetape.web.request_diff import differences
from tests.addons.stores import pg_schema
from tests.conftest import SIM_SPEED, Proc
from tests.ssetape.web.conftest import XSS, Tape, chat, record


def test_the_list_shows_every_exchange_and_the_url_filters_narrow_it(
    client: TestClient, tape: Tape
) -> None:
    everything = tape.exchanges()
    html = client.get("/").text
    assert re.findall(r'<tr data-id="(\d+)"', html) == [str(x.id) for x in everything]
    claude = tape.one(model="claude-sim")
    narrowed = client.get("/", params={"model": "claude", "api": "messages"}).text
    assert re.findall(r'<tr data-id="(\d+)"', narrowed) == [str(claude.id)]
    # The filter form keeps what the URL asked for.
    assert 'name="model" value="claude"' in narrowed
    # The page after an exchange: the older ones only.
    older = client.get("/", params={"before": everything[1].id}).text
    assert re.findall(r'<tr data-id="(\d+)"', older) == [str(x.id) for x in everything[2:]]
    bad = client.get("/", params={"since": "yesterday"})
    assert bad.status_code == 200 and "since &#x27;yesterday&#x27;" in bad.text


def test_recorded_markup_is_shown_as_text_and_no_inline_script_runs(
    client: TestClient, tape: Tape
) -> None:
    xss = tape.one(model=XSS)
    for url in ("/", f"/exchanges/{xss.id}"):
        r = client.get(url)
        assert r.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
        assert XSS not in r.text and not re.search(r"<img\b|onerror=\"", r.text)
        assert re.findall(r"<script[^>]*>", r.text) == ['<script src="/static/app.js" defer>']
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in r.text
    detail = client.get(f"/exchanges/{xss.id}").text
    # In the output, the model name and both headers (request and response).
    assert detail.count("&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;") >= 4


def test_an_exchange_shows_its_request_response_output_findings_and_events(
    client: TestClient, tape: Tape
) -> None:
    x = tape.one(model="gpt-4o-sim-error")
    html = client.get(f"/exchanges/{x.id}").text
    assert "<th>content-type</th><td>text/event-stream" in html  # the response's headers
    assert "<details" in html and "&quot;stream&quot;: true" in html  # pretty-printed body
    assert x.output_text and f'id="output" class="text">{x.output_text}' in html.replace(
        "&#x27;", "'"
    )
    timeline = client.get(f"/exchanges/{x.id}/timeline").text
    assert f'data-src="/exchanges/{x.id}/timeline"' in html and timeline.startswith("<svg")
    assert len(re.findall(r'<line [^>]*class="mark"', timeline)) == x.event_count
    rows = re.findall(r'<tr id="event-(\d+)"', html)
    assert rows == [str(n) for n in range(x.event_count)]
    # A finding that names an event links to its row.
    xss = client.get(f"/exchanges/{tape.one(model=XSS).id}").text
    assert re.findall(r'href="#event-(\d+)">event \d+</a> The event&#x27;s data is not', xss) == [
        "2"
    ]
    assert '<tr id="event-2">' in xss


def test_events_come_in_pages_and_a_long_event_is_cut_with_a_link_to_the_whole(
    client: TestClient, tape: Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = tape.one(model="gpt-4o-sim")
    monkeypatch.setattr(exchange_page, "EVENTS_PER_PAGE", 3)
    monkeypatch.setattr(exchange_page, "DATA_SHOWN", 10)
    first = client.get(f"/exchanges/{x.id}").text
    assert re.findall(r'<tr id="event-(\d+)"', first) == ["0", "1", "2"]
    assert 'href="?after=2#events"' in first
    second = client.get(f"/exchanges/{x.id}", params={"after": 2}).text
    assert re.findall(r'<tr id="event-(\d+)"', second) == ["3", "4", "5"]
    whole = re.search(rf'href="(/exchanges/{x.id}/events/3)"', second)
    assert whole is not None
    raw = client.get(whole.group(1))
    assert raw.headers["content-type"].startswith("text/plain")
    assert raw.headers["x-content-type-options"] == "nosniff"
    assert raw.content.startswith(b"data: ") or raw.content.startswith(b":")


@pytest.mark.parametrize("model", ["gpt-4o-sim", "claude-sim", "o4-mini-sim"])
def test_play_gets_the_output_text_in_pieces_at_their_offsets(
    client: TestClient, tape: Tape, model: str
) -> None:
    x = tape.one(model=model)
    answer = client.get(f"/exchanges/{x.id}/play").json()
    offsets = [o for o, _ in answer["pieces"]]
    assert offsets == sorted(offsets) and len(offsets) > 3
    assert "".join(t for _, t in answer["pieces"]) == x.output_text
    assert answer["cut"] is False


def test_the_viewer_is_read_only_and_unknown_things_are_404(client: TestClient) -> None:
    assert client.post("/").status_code == 405
    assert client.delete("/exchanges/1").status_code == 405
    assert client.get("/exchanges/999999").status_code == 404
    assert client.get("/static/../../pyproject.toml").status_code == 404
    js = client.get("/static/app.js")
    assert js.headers["content-type"].startswith("text/javascript") and "EventSource" in js.text


def test_ssetape_web_listens_on_loopback_and_stops_cleanly(web: Proc, tape: Tape) -> None:
    assert web.url.startswith("http://127.0.0.1:")
    r = httpx.get(web.url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["content-security-policy"] == CSP
    assert len(re.findall(r"<tr data-id=", r.text)) == len(tape.exchanges())


def test_the_pages_read_a_postgresql_store(confdir: Path) -> None:
    with pg_schema() as url, Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        record(url, confdir, sim.url, [chat("gpt-4o-sim"), chat("gpt-4o-sim-error")])
        store = Store.open(url)
        try:
            with TestClient(create_app(Queries(store))) as c:
                ok, error = sorted(Queries(store).exchanges(), key=lambda x: x.id)
                rows = re.findall(r'<tr data-id="(\d+)"', c.get("/").text)
                assert rows == [str(error.id), str(ok.id)]
                narrowed = c.get("/", params={"outcome": "error", "host": "127.0.0.1"}).text
                assert re.findall(r'<tr data-id="(\d+)"', narrowed) == [str(error.id)]
                older = c.get("/", params={"before": error.id}).text
                assert re.findall(r'<tr data-id="(\d+)"', older) == [str(ok.id)]
                assert f'<tr id="event-{ok.event_count - 1}"' in c.get(f"/exchanges/{ok.id}").text
                timeline = c.get(f"/exchanges/{ok.id}/timeline").text
                assert len(re.findall(r'<line [^>]*class="mark"', timeline)) == ok.event_count
                play = c.get(f"/exchanges/{ok.id}/play").json()
                assert "".join(t for _, t in play["pieces"]) == ok.output_text
                stats = c.get("/stats", params={"by": "outcome"}).text
                assert sorted(_stats_rows(stats)) == sorted([ok.outcome, error.outcome])
                buckets = re.findall(r'data-requests="(\d+)" data-errors="(\d+)"', stats)
                assert [sum(int(v[i]) for v in buckets) for i in (0, 1)] == [2, 1]
                both = c.get("/compare", params={"a": ok.id, "b": error.id}).text
                assert 'data-field="messages[0].content"' in both
        finally:
            store.close()


def test_an_exchange_downloads_as_a_cassette_a_har_and_its_timeline(
    client: TestClient, tape: Tape, tmp_path: Path
) -> None:
    x = tape.one(model="gpt-4o-sim-pause")
    cassette = client.get(f"/exchanges/{x.id}/download/cassette")
    assert cassette.headers["content-disposition"].startswith("attachment;")
    (tmp_path / "one.jsonl").write_bytes(cassette.content)
    # What a user does with it: import it into a store of their own; the stream is the same.
    db = str(tmp_path / "copy.db")
    done = CliRunner().invoke(main, ["import", str(tmp_path / "one.jsonl"), "--db", db])
    assert done.exit_code == 0, done.output
    copy = Store.open(db)
    try:
        [y] = Queries(copy).exchanges()
        theirs = [(e.seq, e.offset_us, e.raw) for e in Queries(copy).events(y.id)]
    finally:
        copy.close()
    store = Store.open(tape.db)
    try:
        ours = [(e.seq, e.offset_us, e.raw) for e in Queries(store).events(x.id)]
    finally:
        store.close()
    assert theirs == ours and (y.model, y.path) == (x.model, x.path)
    har = client.get(f"/exchanges/{x.id}/download/har").json()
    [entry] = har["log"]["entries"]
    assert entry["request"]["url"].endswith("/v1/chat/completions")
    svg = client.get(f"/exchanges/{x.id}/download/svg")
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert len(re.findall(r'<line [^>]*class="mark"', svg.text)) == x.event_count
    assert client.get(f"/exchanges/{x.id}/download/zip").status_code == 404


def _stats_rows(html_text: str) -> dict[str, list[str]]:
    """The stats table as a user reads it: group -> its cells' text."""
    shown = {}
    for group, cells in re.findall(r'<tr data-group="([^"]*)">(.*?)</tr>', html_text):
        texts = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", cells)]
        shown[html.unescape(group)] = [html.unescape(t) for t in texts]
    return shown


def _cli_stats(db: str, *args: str) -> list[dict[str, Any]]:
    done = CliRunner().invoke(main, ["stats", "--db", db, "--json", *args])
    assert done.exit_code == 0, done.output
    rows: list[dict[str, Any]] = orjson.loads(done.output)
    return rows


@pytest.mark.parametrize(
    ("by", "filters"),
    [("model", {}), ("api", {}), (None, {}), ("outcome", {"api": "chat_completions"})],
)
def test_the_stats_page_shows_the_groups_and_figures_of_ssetape_stats(
    client: TestClient, tape: Tape, by: str | None, filters: dict[str, str]
) -> None:
    args = ([f"--by={by}"] if by else []) + [f"--{k}={v}" for k, v in filters.items()]
    expected = _cli_stats(tape.db, *args)
    page_ = client.get("/stats", params={**({"by": by} if by else {}), **filters}).text
    shown = _stats_rows(page_)
    assert list(shown) == [g["group"] for g in expected] and expected
    for g in expected:
        cells = shown[g["group"]]
        assert cells[1:4] == [f"{g['count']:,}", f"{g['failed']:,}",
                              f"{g['failed_rate'] * 100:.1f} %"]  # fmt: skip
        ms = [g["ttfb_ms"]["p50"], g["ttfb_ms"]["p95"], g["ttft_ms"]["p50"], g["ttft_ms"]["p95"]]
        assert cells[4:8] == ["" if v is None else f"{v:,.1f} ms" for v in ms]
        assert cells[8:10] == [f"{g['input_tokens']:,}", f"{g['output_tokens']:,}"]
    # The charts: a TTFB spread per group that has one, and over time every exchange and error.
    spreads = re.findall(r'<g class="spread" data-group="([^"]*)"', page_)
    measured = [g["group"] for g in expected if g["ttfb_ms"]["p50"] is not None]
    assert [html.unescape(s) for s in spreads[: len(measured)]] == measured
    buckets = re.findall(r'class="bucket" data-requests="(\d+)" data-errors="(\d+)"', page_)
    assert sum(int(n) for n, _ in buckets) == sum(g["count"] for g in expected)
    assert sum(int(e) for _, e in buckets) == sum(g["failed"] for g in expected)


def test_the_stats_page_keeps_its_view_in_the_url_and_names_a_bad_filter(
    client: TestClient,
) -> None:
    narrowed = client.get("/stats", params={"by": "model", "model": "claude"}).text
    assert list(_stats_rows(narrowed)) == ["claude-sim"]
    # A group links to the list of its exchanges, the other groupings keep the filters.
    assert 'href="/?model=claude-sim"' in narrowed
    assert 'href="/stats?model=claude&amp;by=api"' in narrowed
    assert 'type="hidden" name="by" value="model"' in narrowed
    bad = client.get("/stats", params={"since": "yesterday", "by": "nonsense"})
    assert bad.status_code == 200 and "since &#x27;yesterday&#x27;" in bad.text
    assert list(_stats_rows(bad.text)) == ["all"]  # an unknown grouping: none
    nothing = client.get("/stats", params={"model": "no-such-model"}).text
    assert _stats_rows(nothing) == {} and "no exchanges match" in nothing


def _no_markup_from_the_tape(text: str) -> None:
    assert XSS not in text and not re.search(r"<img\b|onerror=\"", text)
    assert re.findall(r"<script[^>]*>", text) == ['<script src="/static/app.js" defer>']
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in text


def test_stats_and_compare_show_recorded_markup_as_text(client: TestClient, tape: Tape) -> None:
    xss, other = tape.one(model=XSS), tape.one(model="gpt-4o-sim")
    stats = client.get("/stats", params={"by": "model"})
    assert stats.headers["content-security-policy"] == CSP
    _no_markup_from_the_tape(stats.text)
    assert XSS in _stats_rows(stats.text)
    compare = client.get("/compare", params={"a": other.id, "b": xss.id})
    _no_markup_from_the_tape(compare.text)
    # The model (facts, heading), the output, and the request header in the diff.
    assert compare.text.count("&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;") >= 4
    assert 'data-field="x-client-note"' in compare.text


def test_compare_shows_both_texts_on_one_time_axis_and_what_differs_in_the_requests(
    client: TestClient, tape: Tape
) -> None:
    a, b = tape.one(model="gpt-4o-sim"), tape.one(model="claude-sim")
    page_ = client.get("/compare", params={"a": a.id, "b": b.uid}).text
    for side, x in (("a", a), ("b", b)):
        shown = re.search(rf'<pre class="text" id="output-{side}">(.*?)</pre>', page_, re.S)
        assert shown is not None and html.unescape(shown.group(1)) == x.output_text
    # One row per exchange, one mark per event, on one scale.
    rows = re.findall(r'<g class="row" data-id="(\d+)" data-events="(\d+)">(.*?)</g>', page_)
    assert [(int(i), int(n)) for i, n, _ in rows] == [(a.id, a.event_count), (b.id, b.event_count)]
    marks = [len(re.findall(r'class="mark"', r)) for _, _, r in rows]
    assert marks == [a.event_count, b.event_count]
    diff = dict(
        (html.unescape(f), html.unescape(re.sub(r"<[^>]+>", "|", cells)))
        for f, cells in re.findall(r'<tr data-field="([^"]*)">(.*?)</tr>', page_)
    )
    assert '"gpt-4o-sim"' in diff["model"] and '"claude-sim"' in diff["model"]
    assert '"hello gpt-4o-sim"' in diff["messages[0].content"]
    assert "(absent)" in diff["max_tokens"] and "40" in diff["max_tokens"]
    assert "URL" in diff and "stream" not in diff  # both streamed: not a difference
    same = client.get("/compare", params={"a": a.id, "b": a.id}).text
    assert "the requests are the same" in same
    assert client.get("/compare", params={"a": a.id, "b": 999999}).status_code == 404
    empty = client.get("/compare")
    assert empty.status_code == 200 and 'action="/compare"' in empty.text
    # Where a user starts from: the exchange page's form, and the header of every page.
    detail = client.get(f"/exchanges/{a.id}").text
    assert 'id="compare-with"' in detail and 'action="/compare"' in detail
    assert f'type="hidden" name="a" value="{a.id}"' in detail
    for url in ("/", "/stats", "/compare", f"/exchanges/{a.id}"):
        assert '<a href="/stats">stats</a>' in client.get(url).text


def test_the_timeline_zooms_wider_for_a_long_stream(client: TestClient, tape: Tape) -> None:
    x = tape.one(model="gpt-4o-sim-pause")
    widths = {}
    for zoom in ("1", "4", "16", "3", "x"):
        svg = client.get(f"/exchanges/{x.id}/timeline", params={"zoom": zoom}).text
        found = re.match(r'<svg [^>]*width="(\d+)"', svg)
        assert (
            found is not None and len(re.findall(r'<line [^>]*class="mark"', svg)) == x.event_count
        )
        widths[zoom] = int(found.group(1))
    assert widths["4"] == 4 * widths["1"] and widths["16"] == 16 * widths["1"]
    assert widths["3"] == widths["x"] == widths["1"]  # only the offered zooms
    assert 'data-zoom="16"' in client.get(f"/exchanges/{x.id}").text


def test_the_viewer_answers_only_loopback_names_a_rebound_site_is_refused(web: Proc) -> None:
    """A site the user visits can point its own name at 127.0.0.1 (DNS rebinding) and read
    the page with the user's browser: the viewer on loopback answers only loopback names."""
    assert httpx.get(web.url + "/").status_code == 200
    port = web.url.rsplit(":", 1)[1]
    for name in ("localhost", "127.0.0.1"):
        assert httpx.get(web.url + "/", headers={"host": f"{name}:{port}"}).status_code == 200
    rebound = httpx.get(web.url + "/", headers={"host": f"evil.example:{port}"})
    assert rebound.status_code == 400 and "recorded" not in rebound.text


def test_compare_reads_a_body_nested_deeper_than_pythons_recursion_limit() -> None:
    """JSON may nest as deep as the parser allows (orjson: 1024), past Python's recursion
    limit: /compare and the MCP compare tool still tell the differing field."""
    deep = b"[" * 1020 + b"%d" + b"]" * 1020
    a, b = (
        Exchange(method="POST", scheme="https", host="h", port=443, path="/v1/x", query="",
                 request_headers=[], request_body=deep % n)
        for n in (1, 2)
    )  # fmt: skip
    found, cut = differences(a, b)
    assert not cut
    assert [(w, v1, v2) for w, _, v1, v2 in found] == [("body", "1", "2")]
