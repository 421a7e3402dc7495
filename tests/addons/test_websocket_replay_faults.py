"""`ssetape replay --fault` on a Realtime session, seen through the official openai SDK's
Realtime client: the recorded frames before the fault unchanged, then the outage as the SDK
meets a real one (an `error` event it parses, or a connection that drops with no close
frame)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from openai.types.realtime import RealtimeErrorEvent
from websockets.exceptions import ConnectionClosed

from ssetape.storage.store import Store
from tests.conftest import Proc
from tests.ssetape.replay.ws_tapes import ANSWER, UPSTREAM, realtime_frames, record

KEY = "sk-proj-SECRETrealtimeKEY0123456789"


def heard(base: str) -> tuple[list[bytes], ConnectionClosed | None]:
    """One session through ``base``: what came after the SDK's response.create, and how the
    connection ended if the server ended it (None: the answer ended with an error event)."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    got: list[bytes] = []
    with client.realtime.connect(model="m") as conn:
        conn.recv_bytes()  # session.created
        conn.response.create()
        try:
            while b'"type":"error"' not in (got[-1] if got else b""):
                got.append(conn.recv_bytes())
        except ConnectionClosed as e:
            return got, e
    return got, None


@pytest.mark.parametrize("fault", ["error:event=2", "cut:event=2"])
def test_a_fault_on_a_session_reaches_the_sdk_as_a_real_outage(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, fault: str
) -> None:
    db = str(tmp_path / "tape.db")
    with Store.open(db) as store:
        record(store, "a" * 32, realtime_frames())
    proc = ssetape_proc("replay", "--mode", f"reverse:{UPSTREAM}", "--fault", fault, db=db)
    got, closed = heard(proc.url)
    assert got[0] == ANSWER[0].encode()  # the recorded frame before the fault, as it was
    if fault.startswith("error"):
        assert closed is None and len(got) == 2
        event = RealtimeErrorEvent.model_validate_json(got[1])
        assert event.error.type == "server_error" and event.error.message
    else:
        assert got == [ANSWER[0].encode()]
        assert closed is not None and closed.rcvd is None  # no close frame: 1006
    assert proc.stop() == 0
    assert b"replayed 1, missed 0" in proc.log, proc.log.decode()
