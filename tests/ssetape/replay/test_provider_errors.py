"""Every API's own mid-stream error, as a replayed fault sends it: after the first events of
each real stream of the corpus, the error reads as that stream's API says a failure reads
(outcome ``error``), with no other finding; and the HTTP error bodies are labelled."""

from __future__ import annotations

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer  # type: ignore[import-untyped]

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.apis import APIS
from ssetape.analysis.profiles import profile_for
from ssetape.framing.framings import FRAMINGS
from ssetape.replay.provider_errors import ERRORS, errors_for
from tests.corpus import RealStream, real_streams

KEPT = 3  # recorded events played before the fault


def test_every_api_says_its_own_errors() -> None:
    assert set(ERRORS) == set(APIS)


def _read(stream: RealStream, body: bytes) -> Analysis:
    parser = FRAMINGS[stream.framing].parser(1 << 30)
    an = Analyzer(
        method=stream.meta["request_method"],
        path=stream.meta["request_path"],
        request_body=stream.request_body or None,
        profile=profile_for(stream.host),
    )
    for i, f in enumerate([*parser.feed(body), *parser.close()]):
        an.feed_row(i, i * 1000, f.type, f.data, f.raw)
    return an.finish(status=200, state="completed")


def _kept(stream: RealStream) -> bytes:
    return b"".join(f.raw for f in stream.frames()[:KEPT])


@pytest.mark.parametrize(
    "stream",
    # Those the first events leave unfinished (a one-frame Titan answer, a stream whose own
    # error comes early, have nothing left to cut).
    [s for s in real_streams() if not s.encoding and _read(s, _kept(s)).outcome == "cut"],
    ids=lambda s: s.name,
)
def test_a_mid_stream_error_reads_as_the_apis_own_failure(stream: RealStream) -> None:
    before = [f.raw for f in stream.frames()[:KEPT]]
    a = _read(stream, _kept(stream) + errors_for(_read(stream, b"").api).mid_stream(before))
    assert (a.outcome, a.findings) == ("error", [])


def test_bedrocks_error_is_an_exception_frame_boto3_reads() -> None:
    frame = errors_for("bedrock_converse").mid_stream([])
    buffer = EventStreamBuffer()
    buffer.add_data(frame)
    (message,) = list(buffer)
    assert message.headers[":message-type"] == "exception"
    assert message.headers[":exception-type"] == "modelStreamErrorException"
    assert orjson.loads(message.payload)["message"]


@pytest.mark.parametrize(("api", "status"), [(a, s) for a in ERRORS for s in (429, 500, 503)])
def test_an_http_error_body_is_labelled_by_its_api(api: str, status: int) -> None:
    body = orjson.dumps(errors_for(api).status_body(status))
    path = next(iter(APIS[api].paths))
    a = Analyzer(method="POST", path="/model/m" + path if "bedrock" in api else path,
                 request_body=None).finish(status=status, state="completed",
                                           response_body=body)  # fmt: skip
    assert a.outcome == "http_error" and a.reason and a.findings == []
