"""boto3's own bedrock-runtime client through `ssetape record` and `ssetape replay`.

The upstream serves real Amazon Bedrock captures (tests/data/real_streams) frame by frame; every
other part is real: botocore signs the request and reads the AWS event stream with its own
parser, ssetape records it and plays it back. What boto3 reads through ssetape must be what it
reads from the capture served directly (what it would have read from AWS), and the store must
hold one event per frame, as botocore's parser cuts the capture, with the stream's outcome and
usage. Replayed faults must reach boto3 as AWS's own failures would (EventStreamError,
ClientError ThrottlingException, a body that ends early).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3  # type: ignore[import-untyped]
import httpx
import orjson
import pytest
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.eventstream import EventStreamBuffer  # type: ignore[import-untyped]
from botocore.exceptions import ClientError, EventStreamError  # type: ignore[import-untyped]
from urllib3.exceptions import ProtocolError

from ssetape.analysis.knowledge import Knowledge
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc, self_signed, start_ssetape
from tests.corpus import PICK, RealStream, answer, by_name, corpus_upstream
from tests.upstreams import read_request, serving

Events = list[dict[str, Any]]
EVENTSTREAM = "application/vnd.amazon.eventstream"


def model_of(stream: RealStream) -> str:
    """The model id the capture's request path names (``/model/{modelId}/...``)."""
    return unquote(stream.meta["request_path"].split("/")[2])


def aws_frames(stream: RealStream) -> list[tuple[str, int]]:
    """Each frame's ``:event-type`` and length, as botocore's own parser cuts the capture."""
    buffer = EventStreamBuffer()
    buffer.add_data(stream.wire)
    return [(m.headers[":event-type"], m.prelude.total_length) for m in buffer]


class Bedrock:
    """A bedrock-runtime client (us-east-1, dummy credentials) whose requests name the corpus
    stream to serve; keeps the last request it sent, to send again with httpx."""

    def __init__(
        self, endpoint: str, stream: RealStream, *, verify: str | None = None, proxy: str = ""
    ) -> None:
        self.stream = stream
        self.sent: Any = None
        session = boto3.session.Session(
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region_name="us-east-1",
        )
        config = Config(
            retries={"total_max_attempts": 1},  # a failure must show, not be retried away
            connect_timeout=10,
            read_timeout=30,
            proxies={"https": proxy} if proxy else None,
        )
        self.client = session.client(
            "bedrock-runtime", endpoint_url=endpoint, verify=verify, config=config
        )
        events = self.client.meta.events
        events.register("before-sign.bedrock-runtime.*", self._pick)
        events.register("before-send.bedrock-runtime.*", self._keep)

    def _pick(self, request: Any, **_: Any) -> None:
        request.headers[PICK] = self.stream.name

    def _keep(self, request: Any, **_: Any) -> None:
        self.sent = request

    def converse(self) -> Events:
        # The capture's own request: Converse's JSON is boto3's parameters, name for name.
        params = orjson.loads(self.stream.request_body)
        response = self.client.converse_stream(modelId=model_of(self.stream), **params)
        return list(response["stream"])

    def invoke(self) -> Events:
        response = self.client.invoke_model_with_response_stream(
            modelId=model_of(self.stream),
            body=self.stream.request_body,
            contentType="application/json",
            accept="application/json",
        )
        return list(response["body"])

    def raw_again(self, base: str) -> tuple[int, str, bytes]:
        """The last request again, byte for byte, to ``base``: status, content type and the
        body's bytes as they came (boto3 hands out only the decoded events)."""
        url = urlsplit(self.sent.url)
        skip = ("host", "content-length")  # httpx writes its own
        headers = {k: v for k, v in self.sent.headers.items() if k.lower() not in skip}
        target = base + url.path + (f"?{url.query}" if url.query else "")
        with (
            httpx.Client(timeout=30) as client,
            client.stream(self.sent.method, target, content=self.sent.body, headers=headers) as r,
        ):
            return r.status_code, r.headers.get("content-type", ""), b"".join(r.iter_raw())


def check_store(db: str, stream: RealStream) -> dict[str, Any]:
    """The one exchange ``db`` holds for ``stream``: one event per AWS frame, named by its
    ``:event-type``, the capture's bytes, offsets that keep the frames' order, no findings.
    Returns the exchange's knowledge."""
    with Store.open(db, create=False) as store:
        (x,) = [x for x in Queries(store).exchanges() if x.path == stream.meta["request_path"]]
        events = list(Queries(store).events(x.id))
        frames = aws_frames(stream)
        assert [e.seq for e in events] == list(range(len(frames)))
        assert [(e.event, len(e.raw)) for e in events] == frames
        assert b"".join(e.raw for e in events) == stream.wire
        offsets = [e.offset_us for e in events]
        # Paced a few ms apart upstream: the stamps keep the order and show the spread.
        assert offsets == sorted(offsets) and offsets[-1] > offsets[0], offsets
        assert (x.state, x.status, x.event_count) == ("completed", 200, len(frames))
        assert Knowledge(store).findings(x.id) == []
        details = x.details or {}
        return {
            "api": x.api,
            "model": x.model,
            "outcome": (x.outcome, x.outcome_reason),
            "usage": (x.input_tokens, x.output_tokens, x.total_tokens),
            "text": x.output_text,
            "tools": [c.get("name") for c in details.get("tool_calls") or []],
            "scheme_host": (x.scheme, x.host),
        }


def converse_read(events: Events) -> dict[str, Any]:
    """What a Converse stream says, from the events boto3 handed out."""
    kinds = [next(iter(e)) for e in events]
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    starts = [e["contentBlockStart"]["start"] for e in events if "contentBlockStart" in e]
    (stop,) = [e["messageStop"]["stopReason"] for e in events if "messageStop" in e]
    (usage,) = [e["metadata"]["usage"] for e in events if "metadata" in e]
    return {
        "kinds": kinds,
        "text": "".join(d.get("text", "") for d in deltas),
        "tools": [s["toolUse"]["name"] for s in starts if "toolUse" in s],
        "stop": stop,
        "usage": (usage["inputTokens"], usage["outputTokens"], usage["totalTokens"]),
    }


def invoke_read(stream: RealStream, events: Events) -> dict[str, Any]:
    """What an InvokeModelWithResponseStream stream says, from the events boto3 handed out:
    each chunk's bytes are the model's own streaming JSON, and Bedrock's invocation metrics
    ride on the last one."""
    inner = [orjson.loads(e["chunk"]["bytes"]) for e in events]
    metrics = inner[-1]["amazon-bedrock-invocationMetrics"]
    usage = (metrics["inputTokenCount"], metrics["outputTokenCount"])
    if stream.name == ANTHROPIC:  # Anthropic's Messages events, wrapped
        # The model is the one asked for and billed (the path's modelId), not message_start's
        # own version name.
        (start,) = [c["message"] for c in inner if c["type"] == "message_start"]
        assert start["model"] != model_of(stream)
        (delta,) = [c["delta"] for c in inner if c["type"] == "message_delta"]
        deltas = [c["delta"] for c in inner if c["type"] == "content_block_delta"]
        text = "".join(d.get("text", "") for d in deltas)
        return {
            "model": model_of(stream),
            "outcome": ("completed", delta["stop_reason"]),
            "usage": usage,
            "text": text,
        }
    # Llama: one object per chunk, named by nothing but the request path; cut at max_gen_len.
    stops = [c["stop_reason"] for c in inner if c["stop_reason"]]
    assert stops == ["length"]
    return {
        "model": model_of(stream),
        "outcome": ("incomplete", "length"),
        "usage": usage,
        "text": "".join(c["generation"] for c in inner),
    }


CONVERSE = "bedrock_converse_tool_use"
ANTHROPIC = "bedrock_invoke_anthropic_messages"
INVOKES = (ANTHROPIC, "bedrock_invoke_llama_length")


def test_boto3_converse_stream_recorded_and_replayed(ssetape_proc: Callable[..., Proc]) -> None:
    stream = by_name(CONVERSE)
    with corpus_upstream() as upstream:
        from_aws = Bedrock(upstream, stream).converse()
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        recording = Bedrock(rec.url, stream)
        assert recording.converse() == from_aws
        assert rec.stop() == 0
        replay = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=rec.db)
        replaying = Bedrock(replay.url, stream)
        assert replaying.converse() == from_aws
        assert replaying.raw_again(replay.url) == (200, EVENTSTREAM, stream.wire)
    said = converse_read(from_aws)
    assert said["kinds"] == [kind for kind, _ in aws_frames(stream)]
    assert said["stop"] == "tool_use" and said["tools"] == ["fetch_concept"]
    got = check_store(rec.db, stream)
    assert (got["api"], got["model"]) == ("bedrock_converse", model_of(stream))
    assert got["outcome"] == ("completed", said["stop"])
    assert got["usage"] == said["usage"]
    assert (got["text"], got["tools"]) == (said["text"], said["tools"])


def test_boto3_invoke_model_with_response_stream_recorded_and_replayed(
    ssetape_proc: Callable[..., Proc],
) -> None:
    streams = [by_name(name) for name in INVOKES]
    with corpus_upstream() as upstream:
        from_aws = [Bedrock(upstream, stream).invoke() for stream in streams]
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        for stream, expected in zip(streams, from_aws, strict=True):
            assert Bedrock(rec.url, stream).invoke() == expected, stream.name
        assert rec.stop() == 0
        replay = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=rec.db)
        for stream, expected in zip(streams, from_aws, strict=True):
            replaying = Bedrock(replay.url, stream)
            assert replaying.invoke() == expected, stream.name
            assert replaying.raw_again(replay.url) == (200, EVENTSTREAM, stream.wire)
    for stream, events in zip(streams, from_aws, strict=True):
        said = invoke_read(stream, events)
        got = check_store(rec.db, stream)
        assert got["api"] == "bedrock_invoke", stream.name
        assert (got["model"], got["outcome"]) == (said["model"], said["outcome"]), stream.name
        assert (got["usage"][:2], got["text"]) == (said["usage"], said["text"]), stream.name


@contextlib.contextmanager
def tls_corpus_upstream(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The corpus upstream over HTTPS (a self-signed certificate for localhost); yields its
    URL and the certificate, for the proxy to trust."""
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def serve(conn: socket.socket) -> None:
        buffered = b""
        with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
            while (request := read_request(tls, buffered)) is not None:
                fields, buffered = request
                if not answer(tls, by_name(fields.get(PICK, ""))):
                    return

    with serving(serve) as url:
        yield url.replace("http://127.0.0.1", "https://localhost"), cert


def test_boto3_through_the_forward_proxy_with_its_ca(
    ssetape_proc: Callable[..., Proc], confdir: Path, tmp_path: Path
) -> None:
    """HTTPS_PROXY-style: boto3 trusts the proxy's CA (``verify=``) and reaches the endpoint
    through it (``Config(proxies=...)``); replay answers the same way with no upstream left.
    ConverseStream and InvokeModelWithResponseStream (Anthropic's events wrapped) alike."""
    converse, invoke = by_name(CONVERSE), by_name(ANTHROPIC)
    ca = str(confdir / "mitmproxy-ca-cert.pem")
    with tls_corpus_upstream(tmp_path) as (upstream, cert):
        from_aws = Bedrock(upstream, converse, verify=str(cert)).converse()
        invoked = Bedrock(upstream, invoke, verify=str(cert)).invoke()
        rec = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={cert}")
        assert Bedrock(upstream, converse, verify=ca, proxy=rec.url).converse() == from_aws
        assert Bedrock(upstream, invoke, verify=ca, proxy=rec.url).invoke() == invoked
        assert rec.stop() == 0
    replay = ssetape_proc("replay", db=rec.db)
    assert Bedrock(upstream, converse, verify=ca, proxy=replay.url).converse() == from_aws
    assert Bedrock(upstream, invoke, verify=ca, proxy=replay.url).invoke() == invoked
    got = check_store(rec.db, converse)
    said = converse_read(from_aws)
    assert got["scheme_host"] == ("https", "localhost")
    assert (got["api"], got["model"], got["outcome"]) == (
        "bedrock_converse",
        model_of(converse),
        ("completed", said["stop"]),
    )
    assert got["usage"] == said["usage"]
    got, said = check_store(rec.db, invoke), invoke_read(invoke, invoked)
    assert (got["scheme_host"], got["api"]) == (("https", "localhost"), "bedrock_invoke")
    assert (got["model"], got["outcome"]) == (said["model"], said["outcome"])
    assert (got["usage"][:2], got["text"]) == (said["usage"], said["text"])


# -- replayed faults: what boto3 does with an outage served from a real recording ----------


@pytest.fixture(scope="module")
def converse_tape(
    tmp_path_factory: pytest.TempPathFactory, confdir: Path
) -> Iterator[tuple[str, str, Events]]:
    """CONVERSE recorded once for the fault tests (each replays it under its own fault): the
    upstream (up while they run: replay's reverse mode names it), the store, and the events
    boto3 read from the capture."""
    stream = by_name(CONVERSE)
    db = str(tmp_path_factory.mktemp("converse") / "tape.db")
    with corpus_upstream() as upstream:
        from_aws = Bedrock(upstream, stream).converse()
        args = ["--mode", f"reverse:{upstream}", "--db", db, "--port", "0"]
        rec = start_ssetape(["record", *args, "--confdir", str(confdir)], db=db)
        try:
            assert Bedrock(rec.url, stream).converse() == from_aws
        finally:
            assert rec.stop() == 0, rec.log.decode()
        yield upstream, db, from_aws


def read_until_failure(events: Iterable[dict[str, Any]]) -> tuple[Events, BaseException | None]:
    """The events boto3 hands out before the stream fails, and how it fails (None: it ended)."""
    got: Events = []
    try:
        for event in events:
            got.append(event)
    except Exception as e:  # what boto3 raises is what the tests check
        return got, e
    return got, None


def replay_with(
    ssetape_proc: Callable[..., Proc], tape: tuple[str, str, Events], fault: str
) -> Bedrock:
    upstream, db, _ = tape
    replay = ssetape_proc("replay", "--mode", f"reverse:{upstream}", "--fault", fault, db=db)
    return Bedrock(replay.url, by_name(CONVERSE))


def converse_events(client: Bedrock) -> Iterable[dict[str, Any]]:
    params = orjson.loads(client.stream.request_body)
    response = client.client.converse_stream(modelId=model_of(client.stream), **params)
    return response["stream"]  # type: ignore[no-any-return]


def test_boto3_replayed_mid_stream_error_raises_aws_exception(
    ssetape_proc: Callable[..., Proc], converse_tape: tuple[str, str, Events]
) -> None:
    """``error:event=3``: the first 3 recorded events, then Bedrock's exception frame, which
    botocore's own parser raises as EventStreamError (modelStreamErrorException), as from AWS."""
    client = replay_with(ssetape_proc, converse_tape, "error:event=3")
    got, error = read_until_failure(converse_events(client))
    assert got == converse_tape[2][:3]
    assert isinstance(error, EventStreamError), repr(error)
    assert error.response["Error"]["Code"] == "modelStreamErrorException"
    assert "unexpected error" in error.response["Error"]["Message"]
    # On the wire (the same request again, under the same fault: no times= applies to all):
    # the recorded frames' bytes, then one exception frame that ends the body.
    status, kind, body = client.raw_again(client.client.meta.endpoint_url)
    head = sum(length for _, length in aws_frames(by_name(CONVERSE))[:3])
    assert (status, kind, body[:head]) == (200, EVENTSTREAM, by_name(CONVERSE).wire[:head])
    buffer = EventStreamBuffer()
    buffer.add_data(body[head:])
    (frame,) = list(buffer)
    assert frame.headers[":message-type"] == "exception"
    assert frame.headers[":exception-type"] == "modelStreamErrorException"
    assert orjson.loads(frame.payload)["message"] == error.response["Error"]["Message"]


def test_boto3_replayed_throttling_then_the_recording(
    ssetape_proc: Callable[..., Proc], converse_tape: tuple[str, str, Events]
) -> None:
    """``status:429,times=1`` with boto3's retries off: ClientError ThrottlingException (the
    code botocore reads in ``__type``); the next call gets the recorded stream."""
    client = replay_with(ssetape_proc, converse_tape, "status:429,retry_after=1,times=1")
    with pytest.raises(ClientError) as caught:
        converse_events(client)
    assert not isinstance(caught.value, EventStreamError)
    assert caught.value.response["Error"]["Code"] == "ThrottlingException"
    meta = caught.value.response["ResponseMetadata"]
    assert meta["HTTPStatusCode"] == 429
    assert meta["HTTPHeaders"]["retry-after"] == "1"
    assert list(converse_events(client)) == converse_tape[2]


def test_boto3_replayed_cut_stream(
    ssetape_proc: Callable[..., Proc], converse_tape: tuple[str, str, Events]
) -> None:
    """``cut:event=3``: the connection drops after 3 whole recorded frames. boto3 hands out
    those 3 events, then raises what urllib3 raises for a chunked body that stops before its
    last chunk (botocore does not wrap it): the caller sees the outage, not a short answer."""
    client = replay_with(ssetape_proc, converse_tape, "cut:event=3")
    got, error = read_until_failure(converse_events(client))
    assert got == converse_tape[2][:3]
    assert isinstance(error, ProtocolError), repr(error)
    assert "ended prematurely" in str(error)
