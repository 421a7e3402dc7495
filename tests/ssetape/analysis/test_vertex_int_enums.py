"""Real Vertex AI answers with enums as numbers, read as Vertex documents them.

Google's GAPIC REST clients call Vertex AI with ``$alt=json;enum-encoding=int``, so
``finishReason`` (and ``trafficType``, ``modality``) arrive as proto enum numbers. The bodies are
opentelemetry-python-contrib's cassettes (``tests/data/real_streams/vertex_int_*.body``; where
each comes from is its ``.provenance``, kept out of ``tests/corpus.py``'s ``*.json`` corpus
because no stream of them was recorded). Vertex's ``Candidate.FinishReason`` numbers STOP 1 and
MAX_TOKENS 2 (google/cloud/aiplatform/v1/content.proto); ``candidatesTokenCount`` leaves out
``thoughtsTokenCount``, which output_tokens adds back, as Vertex bills it.

Each is read whole (``:generateContent``) and as streamed (``:streamGenerateContent?alt=sse``
sends each ``GenerateContentResponse`` as one ``data:`` event; a unary answer is the whole
stream in one event), from the host it came from: the Vertex profile, with no finding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.profiles import profile_for
from ssetape.framing.sse import SseParser

CORPUS = Path(__file__).parents[2] / "data" / "real_streams"


@dataclass(frozen=True)
class Want:
    name: str
    outcome: str
    reason: str
    input_tokens: int
    output_tokens: int  # candidatesTokenCount + thoughtsTokenCount
    total_tokens: int
    reasoning_tokens: int
    text: str
    calls: list[dict[str, str]]


WANT = [
    Want("vertex_int_text_stop", "completed", "STOP", 5, 299, 304, 294, "This is a test.", []),
    Want(
        "vertex_int_function_calls", "completed", "STOP", 74, 216, 290, 200, "",
        [
            {"id": "", "name": "get_current_weather", "arguments": '{"location":"New Delhi"}'},
            {"id": "", "name": "get_current_weather", "arguments": '{"location":"San Francisco"}'},
        ],
    ),
    # maxOutputTokens 5, all spent thinking: no text and no candidatesTokenCount (proto3 JSON
    # omits a zero count).
    Want("vertex_int_max_tokens", "incomplete", "MAX_TOKENS", 5, 4, 9, 4, "", []),
]  # fmt: skip


def _meta(name: str) -> dict[str, object]:
    meta: dict[str, object] = json.loads((CORPUS / f"{name}.provenance").read_text())
    return meta


def _body(name: str) -> bytes:
    return (CORPUS / str(_meta(name)["body_file"])).read_bytes()


def _analyzer(name: str, path: str) -> Analyzer:
    meta = _meta(name)
    request = str(meta["request_body"]).encode()
    return Analyzer(
        method="POST",
        path=path,
        request_body=request,
        profile=profile_for(str(meta["original_host"])),
    )


def _whole(name: str) -> Analysis:
    an = _analyzer(name, str(_meta(name)["request_path"]))
    ctype = "application/json; charset=UTF-8"
    return an.finish(
        status=200, state="completed", response_body=_body(name), response_content_type=ctype
    )


def _sse(name: str) -> bytes:
    """The answer as streamGenerateContent?alt=sse sends it: one compact ``data:`` line."""
    return b"data: " + orjson.dumps(orjson.loads(_body(name))) + b"\r\n\r\n"


def _streamed(name: str) -> Analysis:
    path = str(_meta(name)["request_path"]).split(":generateContent")[0]
    an = _analyzer(name, f"{path}:streamGenerateContent?alt=sse")
    parser = SseParser()
    for seq, ev in enumerate(parser.feed(_sse(name)) + parser.close()):
        an.feed(seq, seq * 1000, ev.event, ev.data)
    return an.finish(status=200, state="completed", response_content_type="text/event-stream")


def _read(a: Analysis) -> list[object]:
    return [
        a.profile, a.api, a.model, a.outcome, a.reason, a.input_tokens, a.output_tokens,
        a.total_tokens, a.reasoning_tokens, a.output_text, a.tool_calls, a.findings,
    ]  # fmt: skip


def _wanted(w: Want) -> list[object]:
    return [
        "vertex", "gemini", "gemini-2.5-pro", w.outcome, w.reason, w.input_tokens,
        w.output_tokens, w.total_tokens, w.reasoning_tokens, w.text, w.calls, [],
    ]  # fmt: skip


@pytest.mark.parametrize("want", WANT, ids=[w.name for w in WANT])
def test_a_whole_answer_with_int_enums_reads_as_vertex_documents_it(want: Want) -> None:
    # The bytes really carry the number, not the name.
    candidate = orjson.loads(_body(want.name))["candidates"][0]
    assert isinstance(candidate["finishReason"], int)
    assert _read(_whole(want.name)) == _wanted(want)


@pytest.mark.parametrize("want", WANT, ids=[w.name for w in WANT])
def test_the_same_answer_streamed_reads_the_same(want: Want) -> None:
    streamed = _streamed(want.name)
    assert _read(streamed) == _wanted(want)
    assert streamed.ttft_us == (None if not (want.text or want.calls) else 0)


def test_the_provenance_files_stay_out_of_the_stream_corpus() -> None:
    """tests/corpus.py reads every ``*.json`` there as a stream; these are no streams."""
    for want in WANT:
        assert not (CORPUS / f"{want.name}.json").exists()
        meta = _meta(want.name)
        body = _body(want.name)
        assert meta["body_bytes"] == len(body)
        assert str(meta["original_host"]).endswith("aiplatform.googleapis.com")
        assert "enum-encoding%3Dint" in str(meta["request_path"])


def test_the_gemini_api_host_reads_only_the_shared_numbers() -> None:
    """Outside Vertex the profile knows only the numbers both Google protos share; STOP and
    MAX_TOKENS are among them, so the Gemini API's host reads these the same."""
    for want in WANT:
        an = Analyzer(
            method="POST",
            path=str(_meta(want.name)["request_path"]),
            request_body=None,
            profile=profile_for("generativelanguage.googleapis.com"),
        )
        a = an.finish(status=200, state="completed", response_body=_body(want.name))
        assert (a.outcome, a.reason, a.findings) == (want.outcome, want.reason, [])
