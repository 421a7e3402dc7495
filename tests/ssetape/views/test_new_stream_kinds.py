"""Every front end on the new kinds of stream, as a user meets them: Amazon Bedrock's binary AWS
event streams (Converse and InvokeModel), Ollama's NDJSON, Cohere v2 and Google Interactions SSE,
recorded by `ssetape record` from the real captures of tests/data/real_streams.

What a user sees: `list`, `show` (text, --json, --timeline, --svg, --events), `stats`, `export
--har`, the web viewer and the MCP tools name each exchange's API, model, outcome, usage and
text, and never hand a terminal or a page the bytes of a binary frame.
"""

from __future__ import annotations

import base64
import html
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app
from tests.conftest import SSETAPE, start_ssetape
from tests.corpus import PICK, RealStream, by_name, corpus_upstream
from tests.ssetape.analysis.test_real_streams import EXPECTED
from tests.ssetape.mcp_server.client import call, in_memory

# api -> the capture recorded for it (one exchange each).
STREAMS = {
    "bedrock_converse": "bedrock_converse_cache_read",
    "bedrock_invoke": "bedrock_invoke_anthropic_messages",
    "ollama": "ollama_chat_llama3",
    "cohere_chat": "cohere_v2_text",
    "interactions": "interactions_steps_text",
}
BEDROCK = ("bedrock_converse", "bedrock_invoke")
SESSION = "new-kinds"
# What a terminal would act on: C0 controls but tab and newline (CR too: it rewrites a line).
C0 = re.compile(rb"[\x00-\x08\x0b-\x1f]")
# DEL and the C1 controls, as text (a terminal may act on them too).
DEL_C1 = re.compile("[\x7f-\x9f]")
# The headers of an AWS event-stream frame, as they sit in its bytes: never shown as text.
FRAME_HEADER = ":event-type"
# Wide enough that nothing a test looks for is wrapped or cut for want of room.
ENV = {**os.environ, "COLUMNS": "200"}


@dataclass(frozen=True)
class Recorded:
    db: str
    ids: dict[str, int]  # api -> exchange id
    exchanges: dict[str, Exchange]  # api -> the exchange as stored


def expected(api: str) -> tuple[Any, ...]:
    """The capture's row of EXPECTED: (name, profile, api, model, outcome, reason, in, out,
    cache read, cache write, reasoning, first content seq, text length, reasoning length,
    tool calls)."""
    return next(row for row in EXPECTED if row[0] == STREAMS[api])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, confdir: Path) -> Recorded:
    db = str(tmp_path_factory.mktemp("new-kinds") / "tape.db")
    with corpus_upstream() as upstream, httpx.Client(timeout=60) as client:
        proc = start_ssetape(
            ["record", "--mode", f"reverse:{upstream}", "--db", db, "--port", "0",
             "--confdir", str(confdir), "--session", SESSION],
            db=db,
        )  # fmt: skip
        try:
            for name in STREAMS.values():
                s = by_name(name)
                with client.stream(
                    s.meta["request_method"], proc.url + s.meta["request_path"],
                    content=s.request_body or None,
                    headers={PICK: name, "content-type": "application/json"},
                ) as r:  # fmt: skip
                    assert (r.status_code, b"".join(r.iter_raw())) == (200, s.wire), name
        finally:
            assert proc.stop() == 0, proc.log.decode()
    store = Store.open(db, create=False)
    try:
        by_stream = {
            next(v for k, v in x.request_headers or [] if k.lower() == PICK): x
            for x in Queries(store).exchanges()
        }
    finally:
        store.close()
    exchanges = {api: by_stream[name] for api, name in STREAMS.items()}
    return Recorded(db, {api: x.id for api, x in exchanges.items()}, exchanges)


def ssetape(recorded: Recorded, *args: str) -> bytes:
    """``ssetape ARGS --db DB``'s standard output; it must exit 0 with no traceback."""
    r = subprocess.run([SSETAPE, *args, "--db", recorded.db], capture_output=True, env=ENV)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode()
    return r.stdout


def no_controls(out: bytes) -> str:
    """``out`` as text, once checked to hold nothing a terminal acts on."""
    assert C0.findall(out) == [], out[:2000]
    return out.decode()  # also: valid UTF-8


def frames(api: str) -> list[tuple[str | None, str | None]]:
    """The capture's frames as the recorder cuts them: (event, data)."""
    return [(f.type, f.data) for f in by_name(STREAMS[api]).frames()]


# --- the command line --------------------------------------------------------------------


def test_list_names_each_exchange_by_api_model_outcome_and_usage(recorded: Recorded) -> None:
    text = no_controls(ssetape(recorded, "list"))
    docs = {d["api"]: d for d in orjson.loads(ssetape(recorded, "list", "--json"))}
    assert set(docs) == set(STREAMS)
    for api, x in recorded.exchanges.items():
        _, _, _, model, outcome, reason, inp, out, cread, *_ = expected(api)
        d = docs[api]
        got = (d["id"], d["model"], d["outcome"], d["reason"], d["session"], d["state"])
        assert got == (x.id, model, outcome, reason, SESSION, "completed"), api
        assert (d["usage"]["input_tokens"], d["usage"]["output_tokens"]) == (inp, out), api
        assert d["usage"]["cache_read_tokens"] == cread, api
        # One row each: its model (a long one cut to its start), outcome and tokens.
        [row] = [line for line in text.splitlines() if re.match(rf" *{x.id} \d\d:", line)]
        assert model[:10] in row and outcome in row and f"{inp}/{out}" in row, row


@pytest.mark.parametrize("api", STREAMS)
def test_show_prints_the_knowledge_and_events_as_text(recorded: Recorded, api: str) -> None:
    x = recorded.exchanges[api]
    _, _, _, model, outcome, reason, inp, out, *_ = expected(api)
    text = no_controls(ssetape(recorded, "show", str(x.id)))
    assert f"{api} {model}" in text and f"{outcome} ({reason})" in text, text[:600]
    assert f"tokens in/out {inp}/{out}" in text
    assert f"session: {SESSION}" in text
    # The answer as the user read it (its first line; rich wraps the rest).
    first = (x.output_text or "").splitlines()[0]
    assert first[:40] in text
    assert f"{x.event_count} events" in text
    names = {e for e, _ in frames(api) if e}
    assert all(name in text for name in names), names
    # The frames' bytes never: an AWS frame's headers are not shown as text.
    assert FRAME_HEADER not in text


@pytest.mark.parametrize("api", STREAMS)
def test_show_json_holds_the_events_with_their_names_and_data(recorded: Recorded, api: str) -> None:
    x = recorded.exchanges[api]
    _, _, _, model, outcome, reason, inp, out, _, _, _, _, text_len, *_ = expected(api)
    doc = orjson.loads(no_controls(ssetape(recorded, "show", str(x.id), "--json")))
    got = (doc["api"], doc["model"], doc["outcome"], doc["reason"])
    assert got == (api, model, outcome, reason)
    assert (doc["usage"]["input_tokens"], doc["usage"]["output_tokens"]) == (inp, out)
    assert len(doc["output_text"]) == text_len and doc["output_text"] == x.output_text
    assert doc["findings"] == [] and doc["events_total"] == x.event_count
    events = [(e["event"], e["data"]) for e in doc["events"]]
    assert len(events) == x.event_count
    if api in BEDROCK or api == "ollama":
        # One event per frame: the frame's :event-type (Ollama: none) and its JSON text.
        assert events == frames(api)
    for _, data in events:
        # Cohere v2 ends as OpenAI does, with data: [DONE].
        assert data in (None, "[DONE]") or isinstance(orjson.loads(data), dict | list)


def test_show_json_hands_no_frame_byte_a_terminal_acts_on(recorded: Recorded) -> None:
    for api in STREAMS:
        for args in ((), ("--full",)):
            out = ssetape(recorded, "show", str(recorded.ids[api]), "--json", *args)
            assert DEL_C1.findall(out.decode()) == [], (api, args)


@pytest.mark.parametrize("api", STREAMS)
def test_show_timeline_svg_and_a_range_of_events(
    recorded: Recorded, api: str, tmp_path: Path
) -> None:
    x = recorded.exchanges[api]
    timeline = no_controls(ssetape(recorded, "show", str(x.id), "--timeline"))
    assert f"#{x.id} POST" in timeline and f"{x.event_count} events" in timeline
    assert "TTFT" in timeline and FRAME_HEADER not in timeline
    svg = tmp_path / "t.svg"
    said = no_controls(ssetape(recorded, "show", str(x.id), "--svg", str(svg)))
    assert str(svg) in said
    root = ET.fromstring(svg.read_bytes())  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    title = root.find("{http://www.w3.org/2000/svg}title")
    assert title is not None and x.model is not None and x.model in (title.text or "")
    ranged = no_controls(ssetape(recorded, "show", str(x.id), "--events", "1:3"))
    rows = re.findall(r"^ +(\d+) +\d+\.\d ", ranged, re.MULTILINE)
    assert rows == ["1", "2"], ranged[-1500:]
    assert f"{x.event_count - 3} more events: --events 3:" in ranged


def test_stats_counts_tokens_and_prices_by_the_api_spoken(recorded: Recorded) -> None:
    everything = no_controls(ssetape(recorded, "stats"))
    [row] = [line for line in everything.splitlines() if line.startswith("all ")]
    total_in = sum(expected(api)[6] for api in STREAMS)
    total_out = sum(expected(api)[7] for api in STREAMS)
    assert row.split()[1:3] == [str(len(STREAMS)), "0"]
    assert f" {total_in} " in row and f" {total_out} " in row
    no_controls(ssetape(recorded, "stats", "--by", "model"))
    groups = {g["group"]: g for g in orjson.loads(ssetape(recorded, "stats", "--by", "model",
                                                         "--json"))}  # fmt: skip
    assert set(groups) == {expected(api)[3] for api in STREAMS}
    for api in STREAMS:
        g = groups[expected(api)[3]]
        assert (g["count"], g["input_tokens"], g["output_tokens"]) == (1, *expected(api)[6:8])
        # Served from 127.0.0.1, at the rates of the provider whose API it spoke (Bedrock's
        # ids as AWS's, Cohere's, Google's): only Ollama's local model has none, and says why.
        priced = api != "ollama"
        assert (g["priced"], g["unpriced"]) == (int(priced), int(not priced)), api
        assert (g["cost_usd"] is not None) == priced
        assert priced or recorded.exchanges[api].price_note, api
    by_api = orjson.loads(ssetape(recorded, "stats", "--by", "api", "--json"))
    assert {g["group"] for g in by_api} == set(STREAMS)


def test_stats_by_model_names_each_model_whole_on_a_wide_terminal(recorded: Recorded) -> None:
    text = no_controls(ssetape(recorded, "stats", "--by", "model"))
    for api in STREAMS:
        assert expected(api)[3] in text, api


@pytest.mark.parametrize("api", BEDROCK)
def test_export_har_gives_a_binary_stream_as_base64_of_its_exact_bytes(
    recorded: Recorded, api: str, tmp_path: Path
) -> None:
    har = tmp_path / "x.har"
    no_controls(ssetape(recorded, "export", "--id", str(recorded.ids[api]), "-o", str(har)))
    [entry] = orjson.loads(har.read_bytes())["log"]["entries"]
    content = entry["response"]["content"]
    stream: RealStream = by_name(STREAMS[api])
    assert content["encoding"] == "base64"
    assert content["mimeType"] == "application/vnd.amazon.eventstream"
    assert base64.b64decode(content["text"], validate=True) == stream.wire
    assert content["size"] == len(stream.wire)
    assert entry["request"]["postData"]["text"] == stream.request_body.decode()


def test_export_har_gives_an_ndjson_stream_as_text(recorded: Recorded, tmp_path: Path) -> None:
    har = tmp_path / "x.har"
    ssetape(recorded, "export", "--id", str(recorded.ids["ollama"]), "-o", str(har))
    [entry] = orjson.loads(har.read_bytes())["log"]["entries"]
    content = entry["response"]["content"]
    assert "encoding" not in content and content["text"] == by_name(STREAMS["ollama"]).body.decode()


# --- the web viewer ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(recorded: Recorded) -> Iterator[TestClient]:
    store = Store.open(recorded.db)
    try:
        with TestClient(create_app(Queries(store))) as c:
            yield c
    finally:
        store.close()


def page_text(client: TestClient, url: str, **params: str) -> str:
    """A page or fragment that answers 200, checked to hold no binary."""
    r = client.get(url, params=params)
    assert r.status_code == 200, (url, r.text[:500])
    body = no_controls(r.content)
    assert "\ufffd" not in body and FRAME_HEADER not in body, url
    return body


def test_the_web_list_session_and_stats_pages_show_every_kind(
    client: TestClient, recorded: Recorded
) -> None:
    listed = page_text(client, "/")
    assert re.findall(r'<tr data-id="(\d+)"', listed) == sorted(
        (str(i) for i in recorded.ids.values()), key=int, reverse=True
    )
    session = page_text(client, f"/session/{SESSION}")
    for api, x in recorded.exchanges.items():
        assert f'title="{api}" class="cell api">' in listed, api
        assert html.escape(x.model or "") in listed and html.escape(x.model or "") in session
        assert f'href="/exchanges/{x.id}"' in session, api
    stats = page_text(client, "/stats", by="model")
    assert all(html.escape(x.model or "") in stats for x in recorded.exchanges.values())


@pytest.mark.parametrize("api", STREAMS)
def test_the_web_exchange_page_and_its_parts(
    client: TestClient, recorded: Recorded, api: str
) -> None:
    x = recorded.exchanges[api]
    base = f"/exchanges/{x.id}"
    shown = page_text(client, base)
    for value in (api, x.model or "", x.outcome or "", x.outcome_reason or ""):
        assert html.escape(value) in shown, value
    assert html.escape((x.output_text or "").splitlines()[0]) in shown
    assert all(f"<td>{e}</td>" in shown for e, _ in frames(api) if e)
    svg = page_text(client, base + "/timeline")
    assert svg.startswith("<svg") and f"{x.event_count} events" in svg
    play = orjson.loads(page_text(client, base + "/play"))
    assert "".join(text for _, text in play["pieces"]) == x.output_text
    live = page_text(client, base + "/live")
    assert "event: done" in live and f"id: {x.event_count - 1}" in live
    for kind in ("har", "cassette", "svg"):
        assert client.get(f"{base}/download/{kind}").status_code == 200, kind


@pytest.mark.parametrize("api", STREAMS)
def test_the_web_event_endpoint_gives_each_frame_as_sent(
    client: TestClient, recorded: Recorded, api: str
) -> None:
    stream = by_name(STREAMS[api])
    if stream.encoding:
        pytest.skip("pieces of gzip bytes, not frames")
    raw = [f.raw for f in stream.frames()]
    r = client.get(f"/exchanges/{recorded.ids[api]}/events/0")
    assert r.status_code == 200 and r.content == raw[0]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_the_web_event_endpoint_claims_utf8_only_for_utf8(
    client: TestClient, recorded: Recorded
) -> None:
    for api in BEDROCK:
        r = client.get(f"/exchanges/{recorded.ids[api]}/events/0")
        with pytest.raises(UnicodeDecodeError):
            r.content.decode("utf-8")
        assert "charset=utf-8" not in r.headers["content-type"], api


# --- the MCP tools -----------------------------------------------------------------------


def mcp_calls(db: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each tool call's structured answer, from the server in memory (mcp 1 or 2)."""
    store = Store.open(db)

    async def body(client: Any) -> list[dict[str, Any]]:
        return [await call(client, name, **args) for name, args in calls]

    try:
        result: list[dict[str, Any]] = in_memory(store, body)
        return result
    finally:
        store.close()


@pytest.mark.parametrize("api", BEDROCK)
def test_mcp_tools_give_the_derived_text_and_event_names(recorded: Recorded, api: str) -> None:
    x = recorded.exchanges[api]
    listed, one, session = mcp_calls(recorded.db, [
        ("list_exchanges", {"api": api}),
        ("get_exchange", {"id": str(x.id), "events": True, "limit": 200}),
        ("session", {"id": SESSION}),
    ])  # fmt: skip
    [summary] = listed["exchanges"]
    assert (summary["id"], summary["api"], summary["model"]) == (x.id, api, x.model)
    assert (summary["outcome"], summary["findings"]) == (x.outcome, 0)
    assert one["exchange"]["usage"]["output_tokens"] == x.output_tokens
    text = one["analysis"]["output_text"]
    assert text == {"text": x.output_text, "truncated": False, "size": len(x.output_text or "")}
    got = [(e["event"], e["data"]["text"]) for e in one["events"]]
    assert got == frames(api)
    # The response's bytes are the events', not a body: nothing binary is handed out.
    assert one["response"]["body"] is None
    assert {c["api"] for c in session["calls"]} == set(STREAMS)
    assert orjson.dumps(one).find(FRAME_HEADER.encode()) == -1
