"""Gemini Live through `ssetape record` (reverse mode) with google-genai's own Live client.

``client.aio.live.connect`` always dials ``wss://HOST/ws/...BidiGenerateContent``, even for an
``http://`` base URL: the recorder's listener takes the client's TLS handshake with a leaf
certificate of the CA of `ssetape ca` (mitmproxy's reverse mode does, no option needed), and
the client trusts that CA through ``SSL_CERT_FILE``, as a user would set it. The fake upstream
answers as the Live API does (its frames validate as the SDK's ``LiveServerMessage``, which
forbids unknown fields): JSON in binary frames, errors as close codes with a reason."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_gemini import GEMINI_CLOSE, GEMINI_PARTS, GEMINI_USAGE
from ssetape.simulator.ws_wire import DELAY
from tests.addons.test_websocket_knowledge import knowledge, within
from tests.addons.test_websocket_record import stored
from tests.conftest import Proc

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")
errors = pytest.importorskip("google.genai.errors")

GOOGLE_KEY = "AIzaSECRETliveKEY0123456789abcdefghijk"
MODEL = "gemini-live-2.5-flash"
CA = "mitmproxy-ca-cert.pem"  # in the confdir: the CA of `ssetape ca`
PATH = r"/ws/google\.ai\.generativelanguage\.v1(beta)?\.GenerativeService\.BidiGenerateContent"


@pytest.fixture
def upstream() -> Iterator[tuple[Simulator, str]]:
    with Simulator(keep_sessions=True).serve_in_thread() as fake:
        url = fake.url
        yield fake, url


def live(proc: Proc, ca: Path, model: str, turns: list[str]) -> list[list[Any]]:
    """A Live session through ``proc`` (its http:// URL as the base URL) by a client that
    trusts ``ca`` (and only it) through ``SSL_CERT_FILE``: each text a ``clientContent``
    turn, read to ``turnComplete``; the messages the SDK parsed, per turn."""
    with pytest.MonkeyPatch.context() as env:  # read when the client is made
        env.setenv("SSL_CERT_FILE", str(ca))
        options = types.HttpOptions(base_url=proc.url)
        client = genai.Client(api_key=GOOGLE_KEY, http_options=options)
    config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])

    async def talk() -> list[list[Any]]:
        got: list[list[Any]] = []
        async with client.aio.live.connect(model=model, config=config) as session:
            for text in turns:
                content = types.Content(role="user", parts=[types.Part(text=text)])
                await session.send_client_content(turns=content, turn_complete=True)
                got.append([m async for m in session.receive()])
        return got

    return asyncio.run(talk())


def assert_no_key(db: str) -> None:
    """No byte of the key in the store's files (the database, and its journal if any)."""
    for f in Path(db).parent.glob(Path(db).name + "*"):
        assert GOOGLE_KEY.encode() not in f.read_bytes(), f


def test_gemini_live_recorded_through_tls(
    upstream: tuple[Simulator, str], ssetape_proc: Callable[..., Proc], confdir: Path
) -> None:
    fake, url = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    got = live(proc, confdir / CA, MODEL, ["Salut", "Encore"])
    for turn in got:
        assert "".join(m.text or "" for m in turn) == "".join(GEMINI_PARTS)
        assert turn[-1].server_content.turn_complete
        assert turn[-1].usage_metadata.total_token_count == GEMINI_USAGE["totalTokenCount"]

    x, codes = knowledge(proc)
    assert (x.status, x.transport) == (101, "websocket")
    # The API version is the SDK's: v1beta up to google-genai 2, v1 from 3.
    assert re.fullmatch(PATH, x.path), x.path
    assert (x.api, x.model, x.outcome, x.fault) == ("gemini_live", MODEL, "completed", None)
    assert x.output_text == "\n".join(["".join(GEMINI_PARTS)] * 2)  # a turn a line
    assert (x.input_tokens, x.output_tokens, x.total_tokens) == (
        2 * GEMINI_USAGE["promptTokenCount"],  # type: ignore[operator]
        2 * GEMINI_USAGE["responseTokenCount"],  # type: ignore[operator]
        2 * GEMINI_USAGE["totalTokenCount"],  # type: ignore[operator]
    )
    ttfts = (x.details or {})["session"]["ttft_us"]
    assert len(ttfts) == 2 and all(within(t, DELAY) for t in ttfts)
    assert codes == []

    _, events = stored(proc)
    (session,) = fake.sessions
    server = [e for e in events if e.direction == "server"]
    client = [e for e in events if e.direction == "client"]
    # Byte for byte as the upstream sent them, in binary frames; the SDK sends text frames.
    assert [e.raw for e in server] == [f.payload for f in session.sent]
    assert [e.raw for e in client] == [f.payload for f in session.received]
    assert {e.opcode for e in server} == {"binary"} and {e.opcode for e in client} == {"text"}
    assert [e.event for e in client] == ["setup", "client_content", "client_content"]
    assert orjson.loads(client[0].raw or b"")["setup"]["model"] == f"models/{MODEL}"
    for frame in session.sent:  # the Live API's shapes: the SDK forbids unknown fields
        types.LiveServerMessage.model_validate(orjson.loads(frame.payload))
    # The key went upstream as sent; only what is stored is masked.
    assert session.headers.get("x-goog-api-key") == GOOGLE_KEY
    headers = {k.lower(): v for k, v in x.request_headers}
    assert headers["x-goog-api-key"].startswith("<redacted:")
    assert_no_key(proc.db)


def test_gemini_live_close_code_is_a_server_error(
    upstream: tuple[Simulator, str], ssetape_proc: Callable[..., Proc], confdir: Path
) -> None:
    """The Live API refuses a session with a close code and a reason: the SDK raises it, the
    store keeps it as the provider's error."""
    fake, url = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    with pytest.raises(errors.APIError) as refused:
        live(proc, confdir / CA, "gemini-close", ["Salut"])
    assert refused.value.code == GEMINI_CLOSE[0] and GEMINI_CLOSE[1] in str(refused.value)

    x, _ = knowledge(proc)
    assert (x.api, x.model, x.outcome, x.fault) == ("gemini_live", "gemini-close", "error",
                                                    "provider")  # fmt: skip
    assert x.outcome_reason == f"{GEMINI_CLOSE[0]} {GEMINI_CLOSE[1]}"
    _, events = stored(proc)
    assert [(e.direction, e.opcode, e.event) for e in events] == [("client", "text", "setup")]
    assert events[0].raw == fake.sessions[0].received[0].payload
    assert_no_key(proc.db)
