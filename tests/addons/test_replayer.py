"""Timed replay end to end: record from the simulator, stop it, replay through `ssetape replay`."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from sqlalchemy import delete, func, select, update

from ssetape.framing.sse import SseParser
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SIM_SPEED, Proc, tls_simulator

CHAT: dict[str, Any] = {
    "model": "sim-chat",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "replay me"}],
}
MSG: dict[str, Any] = {
    "model": "sim-m",
    "stream": True,
    "max_tokens": 20,
    "messages": [{"role": "user", "content": "replay me"}],
}


def timed(
    base: str, path: str, body: dict[str, Any], *, http2: bool = False
) -> tuple[int, bytes, list[float]]:
    """Status, raw body, and the arrival time of each SSE block after the request was sent
    (``http2``: in HTTP/2 from the first byte, without TLS)."""
    parser, times = SseParser(), []
    with httpx.Client(timeout=30, http1=not http2, http2=http2) as c:
        t0 = time.perf_counter()
        with c.stream("POST", base + path, content=orjson.dumps(body)) as r:
            raw = b""
            for chunk in r.iter_raw():
                now = time.perf_counter() - t0
                raw += chunk
                times += [now] * len(parser.feed(chunk))
    assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    return r.status_code, raw, times


def record(
    proc_factory: Callable[..., Proc], calls: list[tuple[str, dict[str, Any]]], db: str
) -> tuple[str, list[tuple[int, bytes, list[float]]]]:
    """Record `calls` through a private simulator, then stop it: replays cannot reach it."""
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        proc = proc_factory("record", "--mode", f"reverse:{sim.url}", db=db)
        results = [timed(proc.url, path, body) for path, body in calls]
        assert proc.stop() == 0
        return sim.url, results


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "tape.db")


def test_replay_is_byte_identical_with_recorded_gaps(
    ssetape_proc: Callable[..., Proc], db: str
) -> None:
    calls = [("/v1/chat/completions", {**CHAT, "model": "sim-pause"}), ("/v1/messages", MSG)]
    upstream, recorded = record(ssetape_proc, calls, db)
    proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    store = Store.open(db, create=False)
    for (path, body), (status, raw, _), x in zip(
        calls, recorded, sorted(Queries(store).exchanges(), key=lambda x: x.id), strict=True
    ):
        got_status, got_raw, times = timed(proc.url, path, body)
        assert (got_status, got_raw) == (status, raw)
        offsets = [e.offset_us / 1e6 for e in Queries(store).events(x.id)]
        assert len(times) == len(offsets)
        # Each event on its recorded schedule, counted from the request: never early. Events
        # are due at absolute deadlines, so after a late first event (a loaded CI was 6 ms
        # late) the next ones are on time again, which is earlier *relative to the first*.
        late = [t - o for t, o in zip(times, offsets, strict=True)]
        assert min(late) > -0.002, (late, times, offsets)
        # Late only by what a busy machine delays one by (a loaded CI's scheduler took 61 ms
        # once), counted from the first, whose lateness includes the first read of the store:
        # without drift, a late event does not push the ones after it.
        assert max(late) - late[0] < 0.15, (late, times, offsets)
        # And the gaps as recorded, to a few milliseconds, for most events.
        errors = sorted(abs((times[i] - times[i - 1]) - (offsets[i] - offsets[i - 1]))
                        for i in range(1, len(times)))  # fmt: skip
        assert errors[len(errors) // 2] < 0.005, (errors, times, offsets)
    store.close()


def test_replay_over_http2_in_clear_text(ssetape_proc: Callable[..., Proc], db: str) -> None:
    """A client that speaks HTTP/2 without TLS (h2c, prior knowledge) to `ssetape replay`
    gets the recorded bytes on the recorded schedule, as an HTTP/1.1 client does."""
    call = ("/v1/chat/completions", {**CHAT, "model": "sim-pause"})
    upstream, [(status, raw, _)] = record(ssetape_proc, [call], db)
    proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    with Store.open(db, create=False) as store:
        (x,) = Queries(store).exchanges()
        offsets = [e.offset_us / 1e6 for e in Queries(store).events(x.id)]
    got_status, got_raw, times = timed(proc.url, *call, http2=True)
    assert (got_status, got_raw) == (status, raw)
    late = [t - o for t, o in zip(times, offsets, strict=True)]
    assert min(late) > -0.002, (late, times, offsets)  # never early
    assert max(late) - late[0] < 0.15, (late, times, offsets)  # the pause kept


def test_speed_zero_and_two(ssetape_proc: Callable[..., Proc], db: str) -> None:
    body = {**CHAT, "model": "sim-pause"}  # a 1.5 s pause at speed 1 (0.75 s recorded)
    upstream, [(_, raw, rec_times)] = record(ssetape_proc, [("/v1/chat/completions", body)], db)
    fast = ssetape_proc("replay", "--speed", "0", "--mode", f"reverse:{upstream}", db=db)
    _, raw0, times0 = timed(fast.url, "/v1/chat/completions", body)
    assert raw0 == raw and times0[-1] < 0.25 < rec_times[-1]
    double = ssetape_proc("replay", "--speed", "2", "--mode", f"reverse:{upstream}", db=db)
    _, raw2, times2 = timed(double.url, "/v1/chat/completions", body)
    assert raw2 == raw
    assert abs(times2[-1] - rec_times[-1] / 2) < 0.05


def test_sdk_events_equal_after_the_upstream_is_gone(
    ssetape_proc: Callable[..., Proc], db: str
) -> None:
    def run(base: str) -> list[Any]:
        oa = openai.OpenAI(base_url=base + "/v1", api_key="sk-x", max_retries=0)
        chat = [c.model_dump() for c in oa.chat.completions.create(**CHAT)]
        resp = [e.model_dump() for e in oa.responses.create(model="sim-r", input="hi", stream=True)]
        an = anthropic.Anthropic(base_url=base, api_key="sk-ant-x", max_retries=0)
        msgs = [e.model_dump() for e in an.messages.create(**MSG)]
        return [chat, resp, msgs]

    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        direct = run(sim.url)
        rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}", db=db)
        assert run(rec.url) == direct
        assert rec.stop() == 0
        upstream = sim.url
    proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    assert run(proc.url) == direct


def test_truncated_and_error_recordings_replay_as_recorded(
    ssetape_proc: Callable[..., Proc], db: str
) -> None:
    cut = {**CHAT, "model": "sim-cut"}
    err = {**CHAT, "model": "sim-error"}
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}", db=db)
        with pytest.raises(httpx.RemoteProtocolError):
            timed(rec.url, "/v1/chat/completions", cut)
        _, err_raw, _ = timed(rec.url, "/v1/chat/completions", err)
        assert rec.stop() == 0
        upstream = sim.url
    store = Store.open(db, create=False)
    truncated = next(x for x in Queries(store).exchanges() if x.state == "truncated")
    recorded_cut = b"".join(e.raw for e in Queries(store).events(truncated.id))
    store.close()

    proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    got = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", proc.url + "/v1/chat/completions", content=orjson.dumps(cut)) as r,
    ):
        for chunk in r.iter_raw():
            got += chunk
    assert got == recorded_cut  # cut at the same byte
    assert timed(proc.url, "/v1/chat/completions", err)[1] == err_raw


def test_miss_names_the_nearest_recording_and_the_field(
    ssetape_proc: Callable[..., Proc], db: str
) -> None:
    upstream, _ = record(ssetape_proc, [("/v1/chat/completions", CHAT)], db)
    proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    other = {**CHAT, "messages": [{"role": "user", "content": "something else"}]}
    r = httpx.post(proc.url + "/v1/chat/completions", json=other, timeout=30)
    assert r.status_code == 404 and r.headers["x-ssetape-miss"] == "1"
    err = r.json()["error"]
    assert err["nearest"][0]["differences"] == [
        {
            "field": "body.messages[0].content",
            "recorded": "replay me",
            "requested": "something else",
        }
    ]
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key="sk-x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match=r"body\.messages\[0\]\.content"):
        client.chat.completions.create(**other)
    assert b"no recording matches" in proc.log


def test_record_modes(ssetape_proc: Callable[..., Proc], sim: Simulator, db: str) -> None:
    path = "/v1/chat/completions"
    second = {**CHAT, "messages": [{"role": "user", "content": "second"}]}

    def count() -> int:
        s = Store.open(db, create=False)
        n = len(Queries(s).exchanges())
        s.close()
        return n

    # once, empty tape: records
    p = ssetape_proc("replay", "--record-mode", "once", "--mode", f"reverse:{sim.url}", db=db)
    assert timed(p.url, path, CHAT)[0] == 200
    assert p.stop() == 0 and count() == 1
    # once, tape exists: replays, a miss is an error, nothing forwarded
    p = ssetape_proc("replay", "--record-mode", "once", "--mode", f"reverse:{sim.url}", db=db)
    assert timed(p.url, path, CHAT)[0] == 200
    assert timed(p.url, path, second)[0] == 404
    assert p.stop() == 0 and count() == 1
    # new_episodes: a hit replays, a miss goes upstream and is recorded
    p = ssetape_proc(
        "replay", "--record-mode", "new_episodes", "--mode", f"reverse:{sim.url}", db=db
    )
    assert timed(p.url, path, CHAT)[0] == 200
    assert timed(p.url, path, second)[0] == 200
    assert p.stop() == 0 and count() == 2
    # none: misses never reach the upstream
    p = ssetape_proc("replay", "--mode", f"reverse:{sim.url}", db=db)
    third = {**CHAT, "messages": [{"role": "user", "content": "third"}]}
    assert timed(p.url, path, third)[0] == 404
    assert timed(p.url, path, second)[0] == 200  # recorded by new_episodes above
    assert p.stop() == 0 and count() == 2
    # all: everything goes upstream and is recorded again
    p = ssetape_proc("replay", "--record-mode", "all", "--mode", f"reverse:{sim.url}", db=db)
    assert timed(p.url, path, CHAT)[0] == 200
    assert p.stop() == 0 and count() == 3


def test_repeats_ignore_fields_and_host_matching(
    ssetape_proc: Callable[..., Proc], db: str
) -> None:
    a = {**CHAT, "user": "u1", "model": "sim-chat"}
    b = {**CHAT, "user": "u1", "model": "sim-chat", "max_tokens": 5}
    path = "/v1/chat/completions"
    upstream, recorded = record(ssetape_proc, [(path, a), (path, a), (path, b)], db)
    first, second = recorded[0][1], recorded[1][1]
    p = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=db)
    # the two recordings of `a` in order, then the last one again
    assert [timed(p.url, path, a)[1] for _ in range(3)] == [first, second, second]
    p2 = ssetape_proc("replay", "--no-repeat", "--mode", f"reverse:{upstream}", db=db)
    assert [timed(p2.url, path, a)[0] for _ in range(3)] == [200, 200, 404]
    p3 = ssetape_proc("replay", "--ignore-field", "user", "--mode", f"reverse:{upstream}", db=db)
    assert timed(p3.url, path, {**a, "user": "someone-else"})[1] == first
    assert timed(p.url, path, {**a, "user": "someone-else"})[0] == 404
    other_host = upstream.replace("127.0.0.1", "localhost")
    p4 = ssetape_proc("replay", "--no-match-host", "--mode", f"reverse:{other_host}", db=db)
    assert timed(p4.url, path, b)[1] == recorded[2][1]
    p5 = ssetape_proc("replay", "--mode", f"reverse:{other_host}", db=db)
    assert timed(p5.url, path, b)[0] == 404


def test_bad_replay_options(db: str) -> None:
    import subprocess

    from tests.conftest import SSETAPE

    r = subprocess.run(
        [SSETAPE, "replay", "--db", db, "--port", "0"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "no ssetape database" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([SSETAPE, "replay", "--speed", "-1"], capture_output=True, text=True)
    assert r.returncode == 2 and "--speed" in r.stderr


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_https_forward_replay_without_any_upstream(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, db: str, http2: bool
) -> None:
    with tls_simulator(tmp_path) as (sim, upstream_cert):
        base = sim.url.replace("127.0.0.1", "localhost")
        rec = ssetape_proc(
            "record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}", db=db
        )
        ca = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
        with httpx.Client(proxy=rec.url, verify=ca) as c:
            recorded = c.post(base + "/v1/chat/completions", json=CHAT).content
        assert rec.stop() == 0
    # The simulator is stopped: nothing listens upstream any more.
    proc = ssetape_proc("replay", db=db)
    with httpx.Client(proxy=proc.url, verify=ca, http2=http2) as c:
        r = c.post(base + "/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.content == recorded
    assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    with httpx.Client(proxy=proc.url, verify=ca, http2=http2) as c:
        assert c.post(base + "/v1/chat/completions", json={"other": 1}).status_code == 404
    assert proc.stop() == 0
    assert b"ssetape: replayed 1, missed 1" in proc.log  # what it did, on exit


def closing_request(url: str, body: dict[str, Any]) -> bytes:
    """Everything a server sends for one request on its own ``connection: close`` socket,
    to end-of-file (a hang would time out)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    payload = orjson.dumps(body)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        got = b""
        while chunk := s.recv(65536):  # b"" at EOF
            got += chunk
    return got


def test_replay_honours_connection_close(ssetape_proc: Callable[..., Proc], db: str) -> None:
    """An HTTP/1.1 client that asks to close (curl -H 'Connection: close', HTTP/1.0 tools)
    gets the recording and then end-of-file, not a hang."""
    upstream, [(_, raw, _)] = record(ssetape_proc, [("/v1/chat/completions", CHAT)], db)
    proc = ssetape_proc("replay", "--speed", "0", "--mode", f"reverse:{upstream}", db=db)
    got = closing_request(proc.url, CHAT)
    assert got.startswith(b"HTTP/1.1 200") and raw[-20:] in got


@pytest.mark.parametrize("path", ["direct", "via mitmproxy"])
def test_a_recording_with_a_gap_replays_cut_there_and_says_so(
    ssetape_proc: Callable[..., Proc], db: str, path: str
) -> None:
    upstream, [(_, raw, _)] = record(ssetape_proc, [("/v1/chat/completions", CHAT)], db)
    why = "4096 bytes not recorded: the recording process fell behind"
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        events = list(Queries(store).events(x.id))
        with store.Session.begin() as s:  # as a recording process that fell behind leaves it
            s.execute(update(Exchange).where(Exchange.id == x.id).values(gap_seq=5, error=why))
    before_gap = b"".join(e.raw for e in events[:5])
    # A mitmproxy option keeps mitmproxy (and the replayer addon) in the path.
    extra = [] if path == "direct" else ["--set", "http2=true"]
    for allow in (False, True):
        flags = ["--allow-gaps"] if allow else []
        proc = ssetape_proc("replay", "--mode", f"reverse:{upstream}", *extra, *flags, db=db)
        got, header = b"", None
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.Client(timeout=30) as c,
            c.stream("POST", proc.url + "/v1/chat/completions", json=CHAT) as r,
        ):
            header = r.headers.get("x-ssetape-incomplete")
            for chunk in r.iter_raw():
                got += chunk
        assert header == f"from event #5: {why}"
        assert got == (raw if allow else before_gap)
        assert proc.stop() == 0
        assert "is incomplete" in proc.log.decode()


def test_new_episodes_records_a_cut_recording_again(
    ssetape_proc: Callable[..., Proc], sim: Simulator, db: str
) -> None:
    """The upstream cut the stream when it was recorded: new_episodes records it again (and
    says so) instead of replaying the cut for ever; then the whole one is what replays."""
    path = "/v1/chat/completions"
    p = ssetape_proc("record", "--mode", f"reverse:{sim.url}", db=db)
    assert timed(p.url, path, CHAT)[0] == 200
    assert p.stop() == 0
    store = Store.open(db, create=False)
    with store.engine.begin() as conn:  # as a cut leaves it: no [DONE]
        conn.execute(update(Exchange).values(state="truncated"))
        last = select(func.max(Event.seq)).where(Event.exchange_id == 1).scalar_subquery()
        conn.execute(delete(Event).where(Event.exchange_id == 1, Event.seq == last))
    store.close()

    def served(url: str) -> bytes:
        got = b""
        with (
            contextlib.suppress(httpx.RemoteProtocolError),
            httpx.stream("POST", url + path, content=orjson.dumps(CHAT), timeout=30) as r,
        ):
            for chunk in r.iter_raw():
                got += chunk
        return got

    p = ssetape_proc("replay", "--mode", f"reverse:{sim.url}", "--speed", "0", db=db)
    assert b"data: [DONE]" not in served(p.url)  # replayed cut, as recorded
    assert p.stop() == 0
    p = ssetape_proc(
        "replay", "--record-mode", "new_episodes", "--mode", f"reverse:{sim.url}", db=db
    )
    assert timed(p.url, path, CHAT)[0] == 200
    assert p.stop() == 0
    assert b"recording POST 127.0.0.1" in p.log and b"(#1) were cut short" in p.log
    store = Store.open(db, create=False)
    assert [x.state for x in Queries(store).exchanges()] == [
        "completed",
        "truncated",
    ]  # newest first
    store.close()
    p = ssetape_proc("replay", "--mode", f"reverse:{sim.url}", "--speed", "0", db=db)
    assert b"data: [DONE]" in served(p.url)  # the whole one, though the cut one came first
