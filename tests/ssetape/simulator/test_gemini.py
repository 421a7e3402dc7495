"""The simulated Gemini API: ``ssetape.simulator.gemini_streams``, SSE and JSON-array framing."""

from __future__ import annotations

import zlib
from typing import Any

import httpx
import orjson
import pytest

from ssetape.analysis.rules.gemini import RULES
from ssetape.analysis.tally import Tally
from ssetape.framing.json_array import JsonArrayParser
from ssetape.framing.sse import SseParser
from ssetape.simulator.routes import plan, route
from ssetape.simulator.scenario import TTFB, Plan, parse_request
from ssetape.simulator.simulator import Simulator
from ssetape.vocabulary import Outcome

PROMPT = "Tell me about tapes"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}


def path(model: str = "gemini-2.5-flash", sse: bool = True, stream: bool = True) -> str:
    method = "streamGenerateContent" if stream else "generateContent"
    return f"/v1beta/models/{model}:{method}" + ("?alt=sse" if sse and stream else "")


def body(prompt: str = PROMPT, **extra: Any) -> bytes:
    contents = [{"role": "user", "parts": [{"text": prompt}]}]
    return orjson.dumps({"contents": contents, **extra})


def payloads(p: Plan) -> list[dict[str, Any]]:
    """The responses of a streamed plan, parsed back with ssetape's own parsers."""
    gz = dict(p.headers).get("content-encoding") == "gzip"
    dec = zlib.decompressobj(31) if gz else None
    datas = [dec.decompress(c.data) if dec else c.data for c in p.chunks]
    if dict(p.headers)["content-type"].startswith("text/event-stream"):
        sse = SseParser()
        events = [e for d in datas for e in sse.feed(d)] + sse.close()
        assert all(e.raw.endswith(b"\r\n\r\n") for e in events if e.complete)
        return [orjson.loads(e.data) for e in events if e.data is not None and e.complete]
    arr = JsonArrayParser()
    elements = [e for d in datas for e in arr.feed(d)]
    assert not arr.invalid and arr.dropped == 0
    assert arr.ended != p.cut
    return [orjson.loads(e) for e in elements]


def texts(objs: list[dict[str, Any]], thought: bool = False) -> str:
    return "".join(
        part.get("text", "")
        for obj in objs
        for cand in obj.get("candidates", [])
        for part in cand["content"]["parts"]
        if part.get("thought", False) is thought
    )


def analyze(objs: list[dict[str, Any]]) -> Tally:
    tally = Tally("gemini")
    for seq, obj in enumerate(objs):
        RULES.event(tally, seq, None, obj)
    return tally


@pytest.mark.parametrize("sse", [True, False])
def test_text_stream_parses_back(sse: bool) -> None:
    p = plan("POST", path(sse=sse), {}, body())
    sc = parse_request("gemini", {}, body(), path(sse=sse))
    headers = dict(p.headers)
    expected = "text/event-stream" if sse else "application/json; charset=UTF-8"
    assert headers["content-type"] == expected
    assert "content-length" not in headers
    assert p.status == 200 and p.stream and not p.cut
    objs = payloads(p)
    assert len(objs) == 12  # a token per chunk
    assert texts(objs) == sc.text
    last = objs[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert all("finishReason" not in o["candidates"][0] for o in objs[:-1])
    usage = last["usageMetadata"]
    assert usage["promptTokenCount"] == sc.prompt_tokens
    assert usage["candidatesTokenCount"] == 12
    assert usage["totalTokenCount"] == sc.prompt_tokens + 12
    assert {o["modelVersion"] for o in objs} == {"gemini-2.5-flash"}
    tally = analyze(objs)
    assert (tally.outcome, tally.reason, tally.finished) == (Outcome.COMPLETED, "STOP", True)
    assert (tally.output_tokens, tally.model, tally.findings) == (12, "gemini-2.5-flash", [])


def test_array_framing_and_splits() -> None:
    p = plan("POST", path(sse=False), {}, body())
    raw = b"".join(c.data for c in p.chunks)
    assert raw.startswith(b'[{"candidates"') and raw.endswith(b"}\r\n]")
    assert raw.count(b"\r\n,{") == 11
    # Pieces split inside an element and inside a UTF-8 character, as the SSE streams do.
    assert any(not c.data.endswith((b"}", b"]")) for c in p.chunks)
    with pytest.raises(UnicodeDecodeError):
        for c in p.chunks:
            c.data.decode()


def test_timing_is_deterministic_and_scaled() -> None:
    a = plan("POST", path(), {}, body())
    assert a == plan("POST", path(), {}, body())
    times = [c.at for c in a.chunks]
    assert times == sorted(times)
    assert TTFB <= times[0] < TTFB + 0.05
    fast = plan("POST", path(), {}, body(), speed=4.0)
    assert [c.at for c in fast.chunks] == pytest.approx([t / 4 for t in times])
    assert [c.data for c in fast.chunks] == [c.data for c in a.chunks]
    # The framing differs, the schedule does not.
    array = plan("POST", path(sse=False), {}, body())
    assert [c.at for c in array.chunks][:2] == times[:2]


def test_generate_content_is_one_object() -> None:
    p = plan("POST", path(stream=False), {}, body())
    sc = parse_request("gemini", {}, body(), path(stream=False))
    assert not p.stream and len(p.chunks) == 1
    headers = dict(p.headers)
    assert headers["content-type"] == "application/json; charset=UTF-8"
    assert headers["content-length"] == str(len(p.chunks[0].data))
    obj = orjson.loads(p.chunks[0].data)
    assert texts([obj]) == sc.text
    tally = Tally("gemini")
    RULES.body(tally, obj)
    assert (tally.outcome, tally.reason, tally.output_tokens) == (Outcome.COMPLETED, "STOP", 12)


def test_scenario_reads_gemini_requests() -> None:
    raw = body(generationConfig={"maxOutputTokens": 5})
    sc = parse_request("gemini", {}, raw, path("gemini-2.5-pro-sim-pause") + "&key=k")
    assert (sc.model, sc.stream, sc.keywords) == (
        "gemini-2.5-pro-sim-pause",
        True,
        frozenset({"pause"}),
    )
    assert sc.prompt == PROMPT and sc.truncated and len(sc.tokens) == 5
    assert sc.query == "alt=sse&key=k"
    assert route(path()) == route(path(stream=False)) == "gemini"
    assert not parse_request("gemini", {}, raw, path(stream=False)).stream


@pytest.mark.parametrize("sse", [True, False])
def test_token_limit_ends_with_max_tokens(sse: bool) -> None:
    raw = body(generationConfig={"maxOutputTokens": 5})
    objs = payloads(plan("POST", path(sse=sse), {}, raw))
    assert len(objs) == 5
    assert objs[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert analyze(objs).outcome == Outcome.INCOMPLETE


@pytest.mark.parametrize("sse", [True, False])
def test_thinking(sse: bool) -> None:
    raw = body(generationConfig={"thinkingConfig": {"includeThoughts": True}})
    sc = parse_request("gemini", {}, raw, path(sse=sse))
    objs = payloads(plan("POST", path(sse=sse), {}, raw))
    assert texts(objs, thought=True) and texts(objs) == sc.text
    assert objs[-1]["usageMetadata"]["thoughtsTokenCount"] == 8
    tally = analyze(objs)
    assert tally.reasoning and tally.output_tokens == 12 + 8
    assert tally.reasoning_tokens == 8
    # The keyword works without the config.
    assert texts(payloads(plan("POST", path("g-sim-reasoning"), {}, body())), thought=True)


@pytest.mark.parametrize(
    ("model", "outcome", "reason"),
    [
        ("gemini-sim-refusal", Outcome.REFUSED, "SAFETY"),
        ("gemini-sim-refusal-silent", Outcome.REFUSED, "SAFETY"),
        ("gemini-sim-error", Outcome.ERROR, "INTERNAL"),
        ("gemini-sim-failed-plain", Outcome.ERROR, "INTERNAL"),
    ],
)
@pytest.mark.parametrize("sse", [True, False])
def test_refusals_and_errors(model: str, outcome: Outcome, reason: str, sse: bool) -> None:
    p = plan("POST", path(model, sse), {}, body())
    assert p.status == 200 and not p.cut
    objs = payloads(p)
    tally = analyze(objs)
    assert (tally.outcome, tally.reason) == (outcome, reason)
    if "silent" in model:
        assert objs == [objs[0]] and objs[0]["promptFeedback"]["blockReason"] == "SAFETY"
    if outcome == Outcome.ERROR:
        assert objs[-1]["error"]["code"] == 500 and len(texts(objs)) > 0


@pytest.mark.parametrize("sse", [True, False])
def test_cut_stream(sse: bool) -> None:
    p = plan("POST", path("gemini-sim-cut", sse), {}, body())
    assert p.cut
    objs = payloads(p)
    tally = analyze(objs)
    assert tally.outcome is None and not tally.finished
    assert 0 < len(objs) < 12


def test_pause_is_silence() -> None:
    plain = plan("POST", path(sse=False), {}, body())
    paused = plan("POST", path("gemini-sim-pause", sse=False), {}, body())
    gaps = [b.at - a.at for a, b in zip(paused.chunks, paused.chunks[1:], strict=False)]
    assert max(gaps) >= 1.5
    assert b"".join(c.data for c in paused.chunks).count(b"keep-alive") == 0
    assert len(paused.chunks) == len(plain.chunks)


@pytest.mark.parametrize("after_tool", [False, True])
def test_function_call(after_tool: bool) -> None:
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": PROMPT}]}]
    if after_tool:
        call = {"functionCall": {"name": "get_weather", "args": {}}}
        answer = {"functionResponse": {"name": "get_weather", "response": {"temp": 20}}}
        contents += [{"role": "model", "parts": [call]}, {"role": "user", "parts": [answer]}]
    tools = [{"functionDeclarations": [{"name": "get_weather", "parameters": WEATHER}]}]
    raw = orjson.dumps({"contents": contents, "tools": tools})
    objs = payloads(plan("POST", path(), {}, raw))
    tally = analyze(objs)
    assert tally.outcome == Outcome.COMPLETED
    if after_tool:
        assert tally.text and not tally.tools
        return
    assert len(objs) == 1 and not tally.text
    [entry] = tally.tools.values()
    assert entry.name == "get_weather"
    assert orjson.loads(entry.final or "") == {"city": "Zürich", "days": 3}


def test_http_errors_in_google_shape() -> None:
    p = plan("POST", path("gemini-sim-429"), {}, body())
    assert p.status == 429
    err = orjson.loads(p.chunks[0].data)["error"]
    assert (err["code"], err["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert dict(p.headers)["content-type"] == "application/json; charset=UTF-8"
    bad = plan("POST", path(), {}, b"not json")
    assert orjson.loads(bad.chunks[0].data)["error"]["status"] == "INVALID_ARGUMENT"
    assert plan("GET", path(), {}, b"").status == 405
    # Without streaming a mid-stream failure is an HTTP 500.
    assert plan("POST", path("gemini-sim-error", stream=False), {}, body()).status == 500


def test_gzip_stream() -> None:
    p = plan("POST", path("gemini-sim-gzip", sse=False), {"accept-encoding": "gzip"}, body())
    assert dict(p.headers)["content-encoding"] == "gzip"
    assert len(payloads(p)) == 12


def test_served_over_http() -> None:
    with Simulator(speed=20.0).serve_in_thread() as sim, httpx.Client(base_url=sim.url) as client:
        for sse in (True, False):
            chunks: list[bytes] = []
            with client.stream("POST", path(sse=sse), content=body()) as response:
                assert response.status_code == 200
                assert response.headers.get("transfer-encoding") == "chunked"
                chunks.extend(response.iter_raw())
            expected = plan("POST", path(sse=sse), {}, body())
            assert b"".join(chunks) == b"".join(c.data for c in expected.chunks)
