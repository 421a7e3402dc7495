"""`ssetape replay --fault`: a real recording served with a real outage at a chosen point,
seen through the official SDKs and read raw: the bytes before the fault are the recorded ones,
the error is the one the SDK raises for a real outage, retry-after is honoured."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import select

from ssetape.replay.faults import Fault, FaultError, FaultKind, plan
from ssetape.replay.provider_errors import errors_for
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc, start_ssetape

HI = [{"role": "user", "content": "hi"}]
CHAT: dict[str, Any] = {"model": "gpt-4o", "stream": True, "messages": HI}
MESSAGES: dict[str, Any] = {"model": "claude-sonnet-4", "max_tokens": 50, "stream": True,
                            "messages": HI}  # fmt: skip


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(db, upstream): one chat and one Messages stream recorded from the simulator."""
    db = str(tmp_path_factory.mktemp("faults") / "tape.db")
    with Simulator(speed=2.0).serve_in_thread() as sim:
        rec = start_ssetape(["record", "--mode", f"reverse:{sim.url}", "--db", db, "--port", "0"],
                            db=db)  # fmt: skip
        try:
            for path, body in (("/v1/chat/completions", CHAT), ("/v1/messages", MESSAGES)):
                r = httpx.post(rec.url + path, json=body, timeout=30)
                assert r.status_code == 200, r.text
        finally:
            assert rec.stop() == 0
        yield db, sim.url


def recorded(db: str, path: str) -> list[tuple[int, bytes]]:
    """(offset µs, bytes) of the recorded events of the exchange on ``path``."""
    store = Store.open(db, create=False)
    try:
        with store.Session() as s:
            xid = s.scalar(select(Exchange.id).where(Exchange.path == path))
            rows = s.execute(
                select(Event.offset_us, Event.raw)
                .where(Event.exchange_id == xid)
                .order_by(Event.seq)
            )
            return [(off, raw) for off, raw in rows]
    finally:
        store.close()


@pytest.fixture
def replay(tape: tuple[str, str]) -> Iterator[Callable[..., Proc]]:
    procs: list[Proc] = []

    def start(*faults: str, speed: float = 0) -> Proc:
        db, upstream = tape
        args = ["replay", "--db", db, "--port", "0", "--mode", f"reverse:{upstream}",
                "--speed", str(speed)]  # fmt: skip
        for f in faults:
            args += ["--fault", f]
        procs.append(start_ssetape(args, db=db))
        return procs[-1]

    yield start
    for p in procs:
        p.stop()


def raw(url: str, path: str, body: object) -> tuple[bytes, BaseException | None]:
    """The body as it came off the wire, and what ended it if it did not end well."""
    got = b""
    with httpx.stream("POST", url + path, json=body, timeout=30) as r:
        try:
            for data in r.iter_raw():
                got += data
        except httpx.HTTPError as e:
            return got, e
    return got, None


def test_a_fault_spec_is_checked_and_a_bad_one_is_one_line() -> None:
    assert Fault.parse("cut:event=5") == Fault(FaultKind.CUT, after_event=5)
    assert Fault.parse("stall:event=5,ms=2000").ms == 2000
    status = Fault.parse("status:429,retry_after=1.5")
    assert (status.status, status.retry_after, status.times) == (429, 1.5, 1)
    assert Fault.parse(status.spec()) == status
    for bad in ("cut", "cut:event=1,ms=2", "explode:event=1", "stall:event=1", "cut:event=-1",
                "status:200", "error:event=x", "cut:when=3"):  # fmt: skip
        with pytest.raises(FaultError) as e:
            Fault.parse(bad)
        assert "\n" not in str(e.value) and bad.split(":")[0] in str(e.value)
    out = subprocess.run([SSETAPE, "replay", "--fault", "cut:event=1,ms=2"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "either event=N or ms=T" in out.stderr


def test_cut_after_event_n(tape: tuple[str, str], replay: Callable[..., Proc]) -> None:
    db, _ = tape
    events = recorded(db, "/v1/chat/completions")
    p = replay("cut:event=4,times=2")
    body, err = raw(p.url, "/v1/chat/completions", CHAT)
    assert isinstance(err, httpx.RemoteProtocolError)  # the connection dropped mid-body
    assert body == b"".join(raw for _, raw in events[:4])  # byte for byte, nothing after
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
    stream = client.chat.completions.create(**CHAT)
    with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
        for _ in stream:
            pass
    # Its uses spent, the recording plays whole again.
    body, err = raw(p.url, "/v1/chat/completions", CHAT)
    assert err is None and body == b"".join(raw for _, raw in events)


def test_cut_after_ms_at_recorded_timing(
    tape: tuple[str, str], replay: Callable[..., Proc]
) -> None:
    db, _ = tape
    events = recorded(db, "/v1/chat/completions")
    cut_us = events[len(events) // 2][0]  # mid-stream, on the recording's own clock
    p = replay(f"cut:ms={cut_us // 1000}", speed=1)
    t0 = time.monotonic()
    body, err = raw(p.url, "/v1/chat/completions", CHAT)
    took = time.monotonic() - t0
    assert isinstance(err, httpx.RemoteProtocolError)
    assert body == b"".join(raw for off, raw in events if off <= (cut_us // 1000) * 1000)
    assert took >= cut_us / 1e6 * 0.9


def test_stall_before_an_event(tape: tuple[str, str], replay: Callable[..., Proc]) -> None:
    db, _ = tape
    events = recorded(db, "/v1/chat/completions")
    p = replay("stall:event=3,ms=1500")  # speed 0: only the stall takes time
    arrivals: list[tuple[float, bytes]] = []
    t0 = time.monotonic()
    with httpx.stream("POST", p.url + "/v1/chat/completions", json=CHAT, timeout=30) as r:
        for data in r.iter_raw():
            arrivals.append((time.monotonic() - t0, data))
    body = b"".join(d for _, d in arrivals)
    assert body == b"".join(raw for _, raw in events)  # nothing lost, nothing added
    before = b"".join(raw for _, raw in events[:3])
    first_late = next(t for t, _ in arrivals if len(before) < sum(
        len(d) for tt, d in arrivals if tt <= t))  # fmt: skip
    assert first_late >= 1.5 * 0.9
    # A client with a shorter read timeout sees a real read timeout.
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0, timeout=0.5)
    stream = client.chat.completions.create(**CHAT)
    with pytest.raises((httpx.ReadTimeout, openai.APITimeoutError)):
        for _ in stream:
            pass


def test_error_mid_stream_is_the_providers_own(
    tape: tuple[str, str], replay: Callable[..., Proc]
) -> None:
    db, _ = tape
    chat, messages = recorded(db, "/v1/chat/completions"), recorded(db, "/v1/messages")
    p = replay("error:event=5,times=3")
    body, err = raw(p.url, "/v1/chat/completions", CHAT)
    before = b"".join(raw for _, raw in chat[:5])
    assert err is None and body.startswith(before)
    assert b'"finish_reason":"error"' in body[len(before) :] and b'"error":{' in body
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
    texts: list[str] = []
    with pytest.raises(openai.APIError, match="The server had an error"):
        for chunk in client.chat.completions.create(**CHAT):
            texts += [c.delta.content or "" for c in chunk.choices]
    sdk = anthropic.Anthropic(base_url=p.url, api_key="k", max_retries=0)
    kwargs: dict[str, Any] = {k: v for k, v in MESSAGES.items() if k != "stream"}
    with (
        pytest.raises(anthropic.APIStatusError, match="Overloaded") as e,
        sdk.messages.stream(**kwargs) as s,
    ):
        for _ in s:
            pass
    overloaded = {"type": "overloaded_error", "message": "Overloaded"}
    assert e.value.body == {"type": "error", "error": overloaded}
    assert messages  # the Messages recording is there to be faulted


@pytest.mark.anyio
async def test_async_client_sees_the_error_too(
    tape: tuple[str, str], replay: Callable[..., Proc]
) -> None:
    p = replay("error:event=3")
    client = openai.AsyncOpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(**CHAT)
    with pytest.raises(openai.APIError, match="The server had an error"):
        async for _ in stream:
            pass


def test_status_with_retry_after_then_the_recording(
    tape: tuple[str, str], replay: Callable[..., Proc]
) -> None:
    db, _ = tape
    events = recorded(db, "/v1/chat/completions")
    p = replay("status:429,retry_after=1,times=1")
    client = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=1)
    t0 = time.monotonic()
    chunks = list(client.chat.completions.create(**CHAT))
    assert time.monotonic() - t0 >= 0.9  # the SDK waited as it was told, then got the stream
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)
    # Without retries, the SDK's own rate-limit error; then the whole recording.
    p2 = replay("status:503,retry_after=0", "status:429,retry_after=0")
    no_retry = openai.OpenAI(base_url=p2.url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        no_retry.chat.completions.create(**CHAT)
    sdk = anthropic.Anthropic(base_url=p2.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as e:
        sdk.messages.create(**MESSAGES)
    assert e.value.response.headers["retry-after"] == "0"
    body, err = raw(p2.url, "/v1/chat/completions", CHAT)
    assert err is None and body == b"".join(raw for _, raw in events)


def test_anthropic_retries_after_a_503(tape: tuple[str, str], replay: Callable[..., Proc]) -> None:
    p = replay("status:503,retry_after=1")
    sdk = anthropic.Anthropic(base_url=p.url, api_key="k", max_retries=1)
    t0 = time.monotonic()
    kwargs: dict[str, Any] = {k: v for k, v in MESSAGES.items() if k != "stream"}
    with sdk.messages.stream(**kwargs) as s:
        message = s.get_final_message()
    assert time.monotonic() - t0 >= 0.9
    assert message.stop_reason == "end_turn"


def test_faults_paths_are_known(tmp_path: Path) -> None:
    """Every kind has a spec that parses (the CLI help names them all)."""
    from ssetape.replay.faults import EXAMPLES

    kinds = {Fault.parse(s.strip()).kind for s in EXAMPLES.split(", ")}
    assert kinds == set(FaultKind)


def test_each_api_fails_in_its_own_words() -> None:
    """The error that replaces the rest follows the recording: Responses' next sequence
    number, Gemini's CRLF events, the chat stream's id and model."""
    responses = [b'event: response.created\ndata: {"sequence_number":7}\n\n']
    event = errors_for("responses").mid_stream(responses)
    assert event.startswith(b"event: error\ndata: ") and b'"sequence_number":8' in event
    gemini = errors_for("gemini").mid_stream([b'data: {"candidates":[]}\r\n\r\n'])
    assert gemini.endswith(b"\r\n\r\n") and b'"status":"INTERNAL"' in gemini
    chat = errors_for("chat_completions").mid_stream([b'data: {"id":"c1","model":"m"}\n\n'])
    assert b'"id":"c1"' in chat and b'"finish_reason":"error"' in chat
    rows = [(i, i * 10_000, b"data: %d\n\n" % i) for i in range(6)]
    cut = plan([Fault.parse("cut:event=2")], 0, rows, speed=1, complete=True, api=None,
               wire=False)  # fmt: skip
    assert not cut.complete and b"".join(d for _, d in cut.pieces).count(b"data:") == 2


GEMINI = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


@pytest.fixture(scope="module")
def gemini_tape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(db, upstream): one Gemini stream recorded from the simulator with google-genai."""
    from google import genai
    from google.genai import types

    db = str(tmp_path_factory.mktemp("gemini-faults") / "tape.db")
    with Simulator(speed=2.0).serve_in_thread() as sim:
        rec = start_ssetape(["record", "--mode", f"reverse:{sim.url}", "--db", db, "--port", "0"],
                            db=db)  # fmt: skip
        try:
            client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=rec.url))
            chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash",
                                                                contents="hi"))  # fmt: skip
            assert len(chunks) > 3
        finally:
            assert rec.stop() == 0
        yield db, sim.url


def test_gemini_fails_mid_stream_and_retries_a_503_in_google_genai(
    gemini_tape: tuple[str, str],
) -> None:
    from google import genai
    from google.genai import errors, types

    db, upstream = gemini_tape
    args = ["replay", "--db", db, "--port", "0", "--mode", f"reverse:{upstream}",
            "--fault", "status:503,retry_after=1", "--fault", "error:event=2,times=1"]  # fmt: skip
    p = start_ssetape(args, db=db)
    try:
        client = genai.Client(api_key="k", http_options=types.HttpOptions(
            base_url=p.url, retry_options=types.HttpRetryOptions(attempts=1)))  # fmt: skip

        def ask() -> list[str]:
            texts: list[str] = []
            for chunk in client.models.generate_content_stream(
                model="gemini-2.5-flash", contents="hi"
            ):
                texts.append(chunk.text or "")
            return texts

        # First the status fault, before the stream: google-genai's own error for a 503.
        with pytest.raises(errors.ServerError) as e:
            ask()
        assert e.value.code == 503
        # Then the provider's own mid-stream error after the first two recorded chunks: what
        # came before it is what the recording says, and google-genai raises as for Google's.
        whole_texts: list[str] = []
        with pytest.raises(errors.APIError) as e:
            for chunk in client.models.generate_content_stream(
                model="gemini-2.5-flash", contents="hi"
            ):
                whole_texts.append(chunk.text or "")
        assert len(whole_texts) == 2 and e.value.code == 500
        # Its faults spent, the recording plays whole.
        whole = ask()
        assert whole[:2] == whole_texts and len(whole) > 2
    finally:
        p.stop()
