"""The pytest plugin and WebSocket sessions: a test that talks to OpenAI Realtime through the
official SDK records its session into its cassette (every message, who sent it, text frames
as text), and replays it with the upstream gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Imported here, before pytester snapshots sys.modules (see test_pytest_plugin).
import mitmproxy.certs  # noqa: F401
import openai  # noqa: F401
import orjson
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import DELTAS

pytest_plugins = ["pytester"]

KEY = "sk-proj-PLUGINrealtimeKEY0123456789"
TESTS = """
import json
import openai

UPSTREAM = "{upstream}"
OUT = {out!r}


def test_realtime(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="{key}",
                           max_retries=0)
    got = []
    with client.realtime.connect(model="ok") as conn:
        got.append(conn.recv().model_dump(mode="json", exclude_unset=True))
        conn.response.create()
        for event in conn:
            got.append(event.model_dump(mode="json", exclude_unset=True))
            if event.type in ("response.done", "error"):
                break
    with open(OUT, "a") as f:
        f.write(json.dumps(got) + "\\n")
"""
CASSETTE = Path("cassettes/test_ws/test_realtime.jsonl")


@pytest.fixture
def args(confdir: Path) -> list[str]:
    return ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]


def record(pytester: pytest.Pytester, args: list[str]) -> list[dict[str, Any]]:
    """Run the test in record mode ``once`` against the fake Realtime upstream; what the
    SDK received."""
    out = pytester.path / "got.jsonl"
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        pytester.makepyfile(test_ws=TESTS.format(upstream=url, out=str(out), key=KEY))
        pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(passed=1)
    [got] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    out.unlink()
    return list(got)


@pytest.mark.timeout(400)  # recording starts mitmproxy: slow on a loaded machine
def test_a_realtime_session_is_recorded_into_the_cassette(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    got = record(pytester, args)
    assert [e["type"] for e in got][:2] == ["session.created", "response.created"]
    assert got[-1]["type"] == "response.done"
    text = (pytester.path / CASSETTE).read_bytes()
    header, exchange, *messages = [orjson.loads(line) for line in text.splitlines()]
    assert header["ssetape_cassette"] == 3
    assert (exchange["transport"], exchange["status"], exchange["path"]) == (
        "websocket", 101, "/v1/realtime",
    )  # fmt: skip
    # Every message, in order, as the SDK sent or got it, text frames as text.
    assert [(m["direction"], m["opcode"]) for m in messages] == [
        ("server", "text"), ("client", "text"), *[("server", "text")] * (len(DELTAS) + 2),
    ]  # fmt: skip
    server = [orjson.loads(m["raw"]) for m in messages if m["direction"] == "server"]
    assert server == got
    assert orjson.loads(messages[1]["raw"])["type"] == "response.create"
    offsets = [m["offset_us"] for m in messages]
    assert offsets == sorted(offsets)
    assert KEY.encode() not in text and KEY[8:].encode() not in text


@pytest.mark.timeout(600)  # a recording, then a replay
def test_a_recorded_session_replays_offline(pytester: pytest.Pytester, args: list[str]) -> None:
    recorded = record(pytester, args)
    out = pytester.path / "got.jsonl"
    # The upstream is gone: the cassette answers, with the same frames.
    pytester.runpytest(*args).assert_outcomes(passed=1)
    [replayed] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert replayed == recorded
