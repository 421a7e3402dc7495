"""`ssetape show` of a recorded WebSocket session: its two lanes (client frames above, server
frames below) on one time axis, its turns as rows (TTFT, duration, longest gap within the turn,
usage, outcome), `--json` with the turns bounded, `--svg`, and which frames the content
events are (what the gaps and stalls of every surface are measured on)."""

from __future__ import annotations

import io
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.analysis.content_events import ContentEvents
from ssetape.simulator.ws_gemini import GEMINI_USAGE
from ssetape.simulator.ws_realtime import DELTAS, USAGE
from ssetape.simulator.ws_responses import RESPONSES_USAGE
from ssetape.simulator.ws_wire import DELAY
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.views import documents
from ssetape.views.documents import write_detail
from tests.conftest import SSETAPE
from tests.ssetape.views.ws_sessions import (
    LANES,
    THINK,
    Recorded,
    recorded,
    within_ms,
)

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return recorded(tmp_path_factory)


def show(tape: Recorded, name: str, *args: str) -> str:
    out = subprocess.run(
        [SSETAPE, "show", "--db", tape.db, str(tape.ids[name]), *args],
        capture_output=True, check=True, timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    return out.stdout.decode()


def show_json(tape: Recorded, name: str, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(show(tape, name, "--json", *args))
    return doc


def lane(lines: list[str], name: str) -> str:
    """The chart row of a lane, from its bar on."""
    [row] = [line for line in lines if line.startswith(f"{name} ") and "│" in line]
    return row[row.index("│") :]


def test_show_draws_the_client_lane_above_the_server_lane(tape: Recorded) -> None:
    text = show(tape, "two")
    lines = text.splitlines()
    fake = tape.sent["two"]
    client, server, turns = (lane(lines, n) for n in ("client", "server", "turns"))
    # Client above server, the turns under them.
    at = [lines.index(next(x for x in lines if x.startswith(f"{n} ") and "│" in x))
          for n in ("client", "server", "turns")]  # fmt: skip
    assert at == [at[0], at[0] + 1, at[0] + 2]
    # Each lane counts its side's frames, as the fake sent and got them.
    assert client.rsplit(maxsplit=1)[-1] == str(len(fake.received)) == "2"
    assert server.rsplit(maxsplit=1)[-1] == str(len(fake.sent))
    # The two asks, THINK seconds apart: two marks in the client lane, each where its turn
    # starts in the row under the lanes; the server answered after each.
    bar = client[: client.rindex("│")]
    asks = [i for i, ch in enumerate(bar) if ch not in " │"]
    assert len(asks) == 2 and turns.index("1") == asks[0] and turns.index("2") == asks[1]
    answered = [i for i, ch in enumerate(server[: server.rindex("│")]) if ch not in " │"]
    assert all(any(a <= i for i in answered) for a in asks)
    assert turns.rsplit(maxsplit=1)[-1] == "2"
    # The turns table: both completed, each with a TTFT of about the fake's delay.
    rows = [line.split() for line in lines if line.strip().startswith(("1 ", "2 "))]
    rows = [r for r in rows if r[-1] == "completed"]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(within_ms(float(r[3]), DELAY) and r[4] == "ms" for r in rows)
    assert "2 turns" in text
    # Then the frames, each saying who sent it.
    assert any(line.split()[2:4] == ["client", "response.create"] for line in lines
               if line.strip().startswith("1 "))  # fmt: skip


def test_show_json_has_each_turn(tape: Recorded) -> None:
    doc = show_json(tape, "two")
    fake = tape.sent["two"]
    assert doc["frames"]["client"]["frames"] == len(fake.received) == 2
    assert doc["frames"]["server"]["frames"] == len(fake.sent)
    assert doc["frames"]["server"]["bytes"] == sum(len(f.payload) for f in fake.sent)
    assert doc["turns_total"] == 2
    first, second = doc["turns"]
    for turn in (first, second):
        assert turn["outcome"] == "completed" and turn["reason"] is None
        assert within_ms(turn["ttft_ms"], DELAY)
        # Measured within the turn: a few deltas' delays, never the user's silence.
        assert within_ms(turn["gap_max_ms"], DELAY)
        assert within_ms(turn["duration_ms"], DELAY * (len(DELTAS) + 1))
        assert turn["usage"] == {k: USAGE[k] for k in ("input_tokens", "output_tokens",
                                                       "total_tokens")}  # fmt: skip
        assert turn["content_frames"] == len(DELTAS)
        asked = doc["events"][turn["asked_seq"]]
        assert (asked["direction"], asked["event"]) == ("client", "response.create")
        assert asked["offset_us"] / 1000 == pytest.approx(turn["start_ms"], abs=0.002)
    assert second["start_ms"] - first["start_ms"] > THINK * 1000
    # The exchange's TTFT is its first turn's.
    assert doc["ttft_ms"] == first["ttft_ms"]
    # A session's 101 has no body: its frames are its events.
    assert doc["response"]["body"] is None


def test_a_server_error_is_its_turns_outcome(tape: Recorded) -> None:
    doc = show_json(tape, "error")
    [turn] = doc["turns"]
    assert (turn["outcome"], turn["reason"]) == ("error", "server_error")
    assert within_ms(turn["ttft_ms"], DELAY)
    assert turn["end_seq"] is None  # no response.done came
    text = show(tape, "error", "--timeline")
    [row] = [line for line in text.splitlines() if line.strip().startswith("1 ") and " ms" in line]
    assert row.rstrip().endswith("error (server_error)")


def test_gemini_live_turn(tape: Recorded) -> None:
    doc = show_json(tape, "gemini")
    fake = tape.sent["gemini"]
    # JSON in binary frames, counted as binary.
    assert doc["frames"]["client"]["binary"] == len(fake.received) == 2
    assert doc["frames"]["server"]["binary"] == len(fake.sent)
    [turn] = doc["turns"]
    assert turn["outcome"] == "completed" and within_ms(turn["ttft_ms"], DELAY)
    assert turn["usage"] == {"input_tokens": GEMINI_USAGE["promptTokenCount"],
                             "output_tokens": GEMINI_USAGE["responseTokenCount"],
                             "total_tokens": GEMINI_USAGE["totalTokenCount"]}  # fmt: skip
    assert doc["events"][turn["asked_seq"]]["event"] == "clientContent"


def test_responses_lanes_are_turns_of_their_own(tape: Recorded) -> None:
    """Two responses asked at once on one socket (stream_id): their frames interleave, and
    each turn keeps its own ask, TTFT, usage and end."""
    doc = show_json(tape, "lanes")
    assert doc["turns_total"] == 2
    events = doc["events"]
    for turn, name in zip(doc["turns"], LANES, strict=True):
        asked = events[turn["asked_seq"]]
        assert orjson.loads(asked["data"])["stream_id"] == name
        assert turn["outcome"] == "completed" and within_ms(turn["ttft_ms"], DELAY)
        assert turn["usage"]["total_tokens"] == RESPONSES_USAGE["total_tokens"]
        ended = orjson.loads(events[turn["end_seq"]]["data"])
        assert (ended["type"], ended["stream_id"]) == ("response.completed", name)
    first, second = doc["turns"]
    assert second["start_ms"] < first["start_ms"] + first["duration_ms"]  # at once


def test_show_json_holds_the_first_turns(tape: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded as every list of `show --json` is: the first TURNS_SHOWN, and the count."""
    monkeypatch.setattr(documents, "TURNS_SHOWN", 1)
    store = Store.open(tape.db, create=False)
    try:
        q = Queries(store)
        x = q.exchange(tape.ids["two"])
        assert x is not None
        docs = []
        for full in (False, True):
            out = io.BytesIO()
            write_detail(out, x, q, q.findings(x.id), full=full)
            docs.append(orjson.loads(out.getvalue()))
    finally:
        store.close()
    cut, whole = docs
    assert (len(cut["turns"]), cut["turns_total"]) == (1, 2)
    assert (len(whole["turns"]), whole["turns_total"]) == (2, 2)
    assert cut["turns"][0] == whole["turns"][0]


def test_show_svg_draws_both_lanes(tape: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "session.svg"
    said = show(tape, "two", "--svg", str(out))
    assert "2 turns" in said
    root = ET.fromstring(out.read_text())
    lanes = {g.get("data-lane"): g for g in root.iter(f"{SVG}g") if g.get("data-lane")}
    assert list(lanes) == ["client", "server"]
    fake = tape.sent["two"]
    marks = {k: [m for m in g.iter(f"{SVG}line") if "mark" in (m.get("class") or "")]
             for k, g in lanes.items()}  # fmt: skip
    assert len(marks["client"]) == len(fake.received)
    assert len(marks["server"]) == len(fake.sent)
    assert {m.get("class") for m in marks["client"]} == {"mark ask"}
    content = [m for m in marks["server"] if m.get("class") == "mark content"]
    assert len(content) == 2 * len(DELTAS)
    turns = [g for g in root.iter(f"{SVG}g") if g.get("class") == "turn"]
    assert [g.get("data-outcome") for g in turns] == ["completed", "completed"]


def test_content_events_of_a_session(tape: Recorded) -> None:
    """The server frames that carried content are the deltas; the gaps between them are
    measured within a turn: the user's silence between two is not one."""
    store = Store.open(tape.db, create=False)
    try:
        q = Queries(store)
        x = q.exchange(tape.ids["two"])
        assert x is not None
        rows = list(ContentEvents.read(q, x))
        content = [e for e in rows if e.content]
        assert [e.event for e in content] == ["response.output_text.delta"] * (2 * len(DELTAS))
        assert [e.turn for e in content] == [1] * len(DELTAS) + [2] * len(DELTAS)
        gaps = [g.us for g in ContentEvents.stored_gaps(q, x)]
        assert len(gaps) == 2 * (len(DELTAS) - 1)
        assert all(within_ms(g / 1000, DELAY) for g in gaps)
        # Counted across turns, the silence would have been one.
        across = ContentEvents.gaps((e.seq, e.offset_us, e.content) for e in rows)
        assert max(g.us for g in across) > THINK * 1_000_000
        # Read as the pytest plugin reads a record's content events (no direction given).
        reader = ContentEvents.of(x)
        carried = [e.seq for e in q.event_rows(x.id)
                   if reader.carried(e.seq, e.offset_us, e.event, e.data, e.raw)]  # fmt: skip
        assert carried == [e.seq for e in content]
    finally:
        store.close()
