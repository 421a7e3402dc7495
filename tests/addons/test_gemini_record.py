"""Gemini through `ssetape record` and `ssetape replay`: the SSE form (``alt=sse``, what the
google-genai SDK asks for) and the JSON array streamed over chunked ``application/json``, both
relayed piece by piece as they arrive, stored with their timing, replayed byte for byte."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc

BODY = orjson.dumps({"contents": [{"role": "user", "parts": [{"text": "Tell me about tapes"}]}]})


def path(model: str, sse: bool) -> str:
    return f"/v1beta/models/{model}:streamGenerateContent" + ("?alt=sse" if sse else "")


def timed(client: httpx.Client, url: str) -> tuple[bytes, float, float, str]:
    """The body as it came, when its first and last pieces arrived, and its content type."""
    t0 = time.perf_counter()
    pieces, first = [], 0.0
    with client.stream(
        "POST", url, content=BODY, headers={"content-type": "application/json"}
    ) as r:
        assert r.status_code == 200
        for piece in r.iter_raw():
            first = first or time.perf_counter() - t0
            pieces.append(piece)
        return b"".join(pieces), first, time.perf_counter() - t0, r.headers["content-type"]


@pytest.mark.parametrize("sse", [True, False], ids=["alt=sse", "json-array"])
def test_gemini_streams_record_and_replay_with_their_timing(
    sim: Simulator, ssetape_proc: Callable[..., Proc], sse: bool
) -> None:
    model = "gemini-2.5-flash-sim-pause"  # a 1.5 s pause mid-answer (0.75 s at SIM_SPEED)
    with httpx.Client(timeout=60) as client:
        direct, *_ = timed(client, sim.url + path(model, sse))
        rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
        got, first, total, ctype = timed(client, rec.url + path(model, sse))
        assert got == direct
        assert ctype.startswith("text/event-stream" if sse else "application/json")
        # Relayed as it came: the first piece long before the pause ended.
        assert total - first > 0.5
        assert rec.stop() == 0
        store = Store.open(rec.db, create=False)
        try:
            (x,) = Queries(store).exchanges()
            assert x.is_stream and (x.api, x.model, x.outcome) == (
                "gemini", "gemini-2.5-flash-sim-pause", "completed"
            )  # fmt: skip
            assert x.output_text and x.output_tokens and x.ttft_us
            offsets = [e.offset_us for e in Queries(store).events(x.id)]
            assert len(offsets) > 3 and offsets[-1] - offsets[0] > 500_000
        finally:
            store.close()
        replay = ssetape_proc("replay", "--mode", f"reverse:{sim.url}", db=rec.db)
        again, first_again, total_again, _ = timed(client, replay.url + path(model, sse))
        assert again == direct
        assert total_again - first_again > 0.5  # the pause is replayed


def test_the_google_genai_sdk_records_and_replays_without_its_key(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    """The official SDK (it asks for ``alt=sse`` and sends its key in ``x-goog-api-key``)
    reads the same answer live, through the recorder and from the replay; the key is never
    stored."""
    from google import genai
    from google.genai import types

    key = "AIzaSy-SSETAPE-TEST-KEY-1234567890"

    def ask(base_url: str) -> tuple[str, str, int | None]:
        client = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base_url))
        chunks = list(
            client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
        )
        last = chunks[-1]
        assert last.candidates and last.usage_metadata
        text = "".join(c.text or "" for c in chunks)
        return text, str(last.candidates[0].finish_reason), last.usage_metadata.total_token_count

    direct = ask(sim.url)
    rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    assert ask(rec.url) == direct
    assert rec.stop() == 0
    store = Store.open(rec.db, create=False)
    try:
        (x,) = Queries(store).exchanges()
        assert (x.api, x.outcome, x.output_text) == ("gemini", "completed", direct[0])
        assert "alt=sse" in (x.query or "")
    finally:
        store.close()
    db = Path(rec.db)
    for path in db.parent.glob(db.name + "*"):  # the WAL too, if any is left
        assert key.encode() not in path.read_bytes(), path
    replay = ssetape_proc("replay", "--mode", f"reverse:{sim.url}", db=rec.db)
    assert ask(replay.url) == direct


def test_huge_numbers_in_a_gemini_array_are_valid_json(
    ssetape_proc: Callable[..., Proc],
) -> None:
    """Numbers JSON allows but a 64-bit integer or a double cannot hold (a 30-digit id, a
    400-digit one, 1e400) are read, not reported as invalid JSON."""
    from ssetape.analysis.knowledge import Knowledge
    from tests.upstreams import fixed_upstream

    def element(text: str, extra: bytes, end: bool) -> bytes:
        finish = b',"finishReason":"STOP"' if end else b""
        usage = b',"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}' if end else b""
        return (
            b'{"candidates":[{"content":{"parts":[{"text":"%s"}],"role":"model"}%s,"index":0}]'
            b'%s,"modelVersion":"gemini-2.5-flash","x":%s}' % (text.encode(), finish, usage, extra)
        )

    chunks = [
        b"[" + element("a", b"123456789012345678901234567890", False),
        b"\r\n," + element("b", b"-" + b"9" * 400, False),
        b"\r\n," + element("c", b"[1e400, 12345678901234567890.5e-3]", True) + b"]",
    ]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    with fixed_upstream(head, chunks) as upstream:
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        with httpx.Client(timeout=30) as client:
            got = client.post(rec.url + path("gemini-2.5-flash", False), content=BODY)
        assert got.content == b"".join(chunks)
        assert rec.stop() == 0
    with Store.open(rec.db, create=False) as store:
        (x,) = Queries(store).exchanges()
        findings = [(f.code, f.detail) for f in Knowledge(store).findings(x.id)]
        assert findings == []
        assert (x.outcome, x.output_text, x.output_tokens) == ("completed", "abc", 2)
