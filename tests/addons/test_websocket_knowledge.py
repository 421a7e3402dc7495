"""What a recorded WebSocket session said and how it ended, through real `ssetape record`:
the official openai SDK's Realtime client, and Gemini Live frames from a raw websockets
client, against a fake upstream that answers as those APIs do. The knowledge is the one the
recording process saved as the session ended, and `ssetape reindex` finds it again."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_gemini import GEMINI_CLOSE, GEMINI_PARTS
from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON, DELTAS, USAGE
from ssetape.simulator.ws_wire import DELAY
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_websocket_record import KEY, one_response
from tests.conftest import SSETAPE, Proc

GEMINI_PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
KNOWN = ("api", "model", "outcome", "outcome_reason", "fault", "input_tokens", "output_tokens",
         "total_tokens", "cache_read_tokens", "ttft_us", "gap_max_us", "output_text")  # fmt: skip


@pytest.fixture
def realtime() -> Iterator[tuple[Simulator, str]]:
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        yield upstream, url


def knowledge(proc: Proc) -> tuple[Exchange, list[str]]:
    """The session as stored when the recorder stopped, then checked against a reindex."""
    assert proc.stop() == 0
    live, codes = _read(proc.db)
    reindex = [SSETAPE, "reindex", "--db", proc.db]
    subprocess.run(reindex, check=True, capture_output=True, timeout=120)
    again, again_codes = _read(proc.db)
    assert [getattr(again, k) for k in KNOWN] == [getattr(live, k) for k in KNOWN]
    assert again_codes == codes
    return live, codes


def _read(db: str) -> tuple[Exchange, list[str]]:
    store = Store.open(db, create=False)
    try:
        q = Queries(store)
        (x,) = q.exchanges(limit=10)
        return x, [f.code for f in q.findings(x.id)]
    finally:
        store.close()


def within(us: int | None, seconds: float) -> bool:
    """About ``seconds`` (the fake's delay), with wide margins for a busy machine."""
    return us is not None and seconds * 0.5e6 < us < seconds * 1e6 + 500_000


def test_realtime_session_knowledge(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    _, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    assert one_response("gpt-realtime-mini", proc)[-1] == "response.done"
    x, codes = knowledge(proc)
    assert (x.api, x.model, x.outcome, x.fault) == (
        "openai_realtime", "gpt-realtime-mini", "completed", None,
    )  # fmt: skip
    assert (x.input_tokens, x.output_tokens, x.total_tokens, x.cache_read_tokens) == (
        USAGE["input_tokens"], USAGE["output_tokens"], USAGE["total_tokens"], 4,
    )  # fmt: skip
    assert x.output_text == "".join(DELTAS)
    # From response.create to the first delta: the fake waits DELAY before it.
    assert within(x.ttft_us, DELAY)
    assert within(x.gap_max_us, DELAY)
    assert codes == []
    assert x.details["session"]["responses"] == 1


@pytest.mark.parametrize(
    ("model", "outcome", "reason"),
    [
        ("error", "error", "server_error"),
        ("close", "error", f"{CLOSE_CODE} {CLOSE_REASON}"),
        ("cut", "cut", "connection closed without a WebSocket close frame"),
    ],
)
def test_how_a_realtime_session_ended(
    model: str, outcome: str, reason: str,
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc],
) -> None:  # fmt: skip
    _, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    one_response(model, proc)
    x, codes = knowledge(proc)
    assert (x.api, x.outcome, x.outcome_reason, x.fault) == (
        "openai_realtime", outcome, reason, "provider",
    )  # fmt: skip
    # What arrived before the end is kept: the text so far.
    assert x.output_text.startswith("".join(DELTAS[:2]))
    assert ("server_error" in codes) == (model == "error")


def test_the_silence_between_two_responses_is_not_a_gap(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    _, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key=KEY, max_retries=0)
    with client.realtime.connect(model="gpt-realtime") as conn:
        assert conn.recv().type == "session.created"
        for turn in range(2):
            if turn:
                time.sleep(2.0)  # the user thinks
            conn.response.create()
            for event in conn:
                if event.type == "response.done":
                    break
    x, _ = knowledge(proc)
    assert x.outcome == "completed"
    assert x.gap_max_us is not None and x.gap_max_us < 1_000_000
    assert within(x.ttft_us, DELAY)
    assert x.output_text == "\n".join(["".join(DELTAS)] * 2)  # a response a line
    assert (x.input_tokens, x.output_tokens) == (
        2 * USAGE["input_tokens"],
        2 * USAGE["output_tokens"],
    )  # type: ignore[operator]
    ttfts = x.details["session"]["ttft_us"]
    assert len(ttfts) == 2 and all(within(t, DELAY) for t in ttfts)


def gemini(proc: Proc, model: str) -> list[Any]:
    """A Gemini Live session as google-genai speaks it: setup, then one clientContent turn."""
    got: list[Any] = []
    with connect(proc.url.replace("http://", "ws://") + GEMINI_PATH) as ws:
        ws.send(orjson.dumps({"setup": {"model": f"models/{model}"}}))
        try:
            got.append(orjson.loads(ws.recv(timeout=10)))
            turn = {"turns": [{"role": "user", "parts": [{"text": "Hi"}]}], "turnComplete": True}
            ws.send(orjson.dumps({"clientContent": turn}))
            while "usageMetadata" not in got[-1]:
                got.append(orjson.loads(ws.recv(timeout=10)))
        except ConnectionClosed as e:
            got.append(e.rcvd.code if e.rcvd else None)
    return got


def test_gemini_live_session_knowledge(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    _, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    got = gemini(proc, "gemini-live-2.5-flash")
    assert got[0] == {"setupComplete": {}} and got[-1]["serverContent"]["turnComplete"]
    x, codes = knowledge(proc)
    assert (x.api, x.model, x.outcome, x.output_text) == (
        "gemini_live", "gemini-live-2.5-flash", "completed", "".join(GEMINI_PARTS),
    )  # fmt: skip
    assert (x.input_tokens, x.output_tokens, x.total_tokens) == (9, 5, 14)
    assert within(x.ttft_us, DELAY) and within(x.gap_max_us, DELAY)
    assert codes == []


def test_gemini_live_error_is_its_close_code(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    _, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    assert gemini(proc, "gemini-close") == [GEMINI_CLOSE[0]]
    x, _ = knowledge(proc)
    assert (x.api, x.model, x.outcome, x.fault) == (
        "gemini_live",
        "gemini-close",
        "error",
        "provider",
    )
    assert x.outcome_reason == f"{GEMINI_CLOSE[0]} {GEMINI_CLOSE[1]}"
