"""The pytest plugin, run by pytester: record from the simulator, replay with it gone."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path
from typing import Any

import httpx  # noqa: F401

# Imported here, before pytester snapshots sys.modules: in-process runs drop what they import,
# and C extensions (SQLAlchemy's) do not survive being imported twice.
import mitmproxy.certs  # noqa: F401
import openai  # noqa: F401
import orjson
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

TESTS = """
import json, time
import httpx, openai, pytest

UPSTREAM = "{upstream}"
OUT = {out!r}
CHAT = dict(model="sim-pause", stream=True, messages=[{{"role": "user", "content": "{content}"}}])


def keep(name, value):
    with open(OUT, "a") as f:
        f.write(json.dumps([name, value]) + "\\n")


def test_chat(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="sk-test-abc",
                           max_retries=0)
    t0, events, times = time.perf_counter(), [], []
    for chunk in client.chat.completions.create(**CHAT):
        events.append(chunk.model_dump())
        times.append(time.perf_counter() - t0)
    keep("chat", events)
    keep("chat_times", times)


@pytest.mark.anyio
async def test_async(ssetape):
    client = openai.AsyncOpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="sk-test-abc",
                                max_retries=0)
    stream = await client.responses.create(model="sim-r", input="{content}", stream=True)
    keep("async", [event.model_dump() async for event in stream])


def test_proxy(ssetape):
    with httpx.Client(proxy=ssetape.proxy_url, verify=ssetape.ca_file, timeout=30) as c:
        r = c.post(UPSTREAM + "/v1/chat/completions", json=dict(CHAT, model="sim-chat"))
    keep("proxy", [r.status_code, r.text])
"""

MORE = """

def test_swallowed(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k", max_retries=0)
    try:
        list(client.chat.completions.create(**CHAT))
    except openai.NotFoundError:
        pass


@pytest.mark.ssetape("cassettes/test_llm/test_chat.jsonl", ignore_fields=["messages"])
def test_ignored(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k", max_retries=0)
    assert len(list(client.chat.completions.create(**CHAT))) > 3
"""


def kept(path: Path) -> dict[str, Any]:
    out = {}
    for line in path.read_text().splitlines():
        name, value = orjson.loads(line)
        out[name] = value
    path.unlink()
    return out


@pytest.fixture
def confdir_args(confdir: Path) -> list[str]:
    return ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]


def test_record_once_then_replay_offline(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    out = pytester.path / "kept.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        upstream = sim.url
        pytester.makepyfile(test_llm=TESTS.format(upstream=upstream, out=str(out), content="hi"))
        pytester.runpytest("--ssetape-record-mode=once", *confdir_args).assert_outcomes(passed=3)
    recorded = kept(out)
    cassettes = pytester.path / "cassettes" / "test_llm"
    assert sorted(p.name for p in cassettes.iterdir()) == [
        "test_async[asyncio].jsonl", "test_chat.jsonl", "test_proxy.jsonl"
    ]  # fmt: skip
    for p in cassettes.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        assert "sk-test-abc" not in p.read_text()
    assert recorded["proxy"][0] == 200

    # The simulator is gone: replay only, identical SDK events.
    t = time.monotonic()
    pytester.runpytest(*confdir_args).assert_outcomes(passed=3)
    replayed = kept(out)
    assert replayed == {**recorded, "chat_times": replayed["chat_times"]}
    span = [times[-1] - times[0] for times in (replayed["chat_times"], recorded["chat_times"])]
    assert span[0] < 0.2 < 0.6 < span[1]  # speed 0: all at once
    assert time.monotonic() - t < 30

    # Speed 1: the recorded gaps come back (the pause is ~0.75 s at the simulator's speed).
    pytester.runpytest("--ssetape-speed", "1", "-k", "chat", *confdir_args).assert_outcomes(
        passed=1
    )
    rec, rep = recorded["chat_times"], kept(out)["chat_times"]
    assert abs((rep[-1] - rep[0]) - (rec[-1] - rec[0])) < 0.25, (rec, rep)
    gap = max(range(1, len(rec)), key=lambda i: rec[i] - rec[i - 1])
    assert abs((rep[gap] - rep[gap - 1]) - (rec[gap] - rec[gap - 1])) < 0.15, (rec, rep)

    # A changed request fails at once, with the nearest recording and the field.
    pytester.makepyfile(
        test_llm=TESTS.format(upstream=upstream, out=str(out), content="bye") + MORE
    )
    t = time.monotonic()
    result = pytester.runpytest("-k", "chat or swallowed or ignored", *confdir_args)
    result.assert_outcomes(passed=1, failed=2)
    assert time.monotonic() - t < 30
    text = result.stdout.str()
    assert "body.messages[0].content (recorded 'hi', requested 'bye')" in text
    # One name for the nearest recording (the 404's body, the log, the report), with its port.
    assert f"nearest is cassette line 2: POST {upstream}/v1/chat/completions" in text
    assert "nearest is #" not in text
    assert "test_swallowed - ssetape: 1 request(s) not in cassette" in text
    assert "--ssetape-record-mode=new_episodes" in text


def test_missing_and_malformed_cassettes(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    pytester.makepyfile(
        test_bad="""
import httpx, pytest

@pytest.mark.ssetape("bad.jsonl")
def test_bad(ssetape):
    pass

def test_missing(ssetape):
    r = httpx.post(ssetape.base_url("https://api.example.com:8443/v1") + "/chat/completions",
                   json={})
    assert r.status_code == 404 and r.headers["x-ssetape-miss"] == "1"

@pytest.mark.ssetape(colour="blue")
def test_typo(ssetape):
    pass
"""
    )
    pytester.path.joinpath("bad.jsonl").write_text('{"ssetape_cassette": 7}\n')
    result = pytester.runpytest(*confdir_args)
    result.assert_outcomes(errors=2, failed=1)
    text = result.stdout.str()
    assert "bad.jsonl:1: cassette format version 7 is newer than this ssetape reads" in text
    assert (
        "test_missing.jsonl (it does not exist: record it with --ssetape-record-mode=once)" in text
    )
    assert (
        "no recording matches POST api.example.com:8443/v1/chat/completions; the tape is empty"
        in text
    )
    assert "@pytest.mark.ssetape has no option colour" in text


def test_parallel_workers_share_a_cassette(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(
            test_shared=f'''
import httpx, pytest

pytestmark = pytest.mark.ssetape("shared.jsonl")

@pytest.mark.parametrize("n", range(2))
def test_one(ssetape, n):
    body = {{"model": "sim-chat", "messages": [{{"role": "user", "content": str(n)}}]}}
    r = httpx.post(ssetape.base_url("{sim.url}") + "/v1/chat/completions", json=body)
    assert r.status_code == 200
'''
        )
        # `all`: each worker records, and tests of one run sharing a cassette add up.
        args = ["-n", "2", "--ssetape-record-mode=all", *confdir_args]
        pytester.runpytest(*args).assert_outcomes(passed=2)
    lines = pytester.path.joinpath("shared.jsonl").read_text().splitlines()
    assert sum('"kind":"exchange"' in line for line in lines) == 2
    pytester.runpytest("-n", "2", *confdir_args).assert_outcomes(passed=2)


def hand_cassette(path: Path, raw: list[bytes], **exchange: Any) -> None:
    """A cassette of one GET https://api.example.com/v1/feed streaming ``raw``, 2 ms apart."""
    import datetime as dt
    from typing import cast

    from sqlalchemy import Table, insert

    from ssetape.cassettes.cassette import Cassette
    from ssetape.storage.models import Event, Exchange
    from ssetape.storage.store import Store

    store = Store.open(str(path.with_suffix(".db")))
    with store.engine.begin() as conn:
        xid = conn.execute(
            insert(cast(Table, Exchange.__table__)).returning(Exchange.__table__.c.id),
            {
                "uid": "e" * 32, "started_at": dt.datetime.now(dt.UTC), "method": "GET",
                "scheme": "https", "host": "api.example.com", "port": 443, "path": "/v1/feed",
                "http_version": "HTTP/1.1", "request_headers": [], "fingerprint": "x",
                "status": 200, "reason": "OK", "is_stream": True, "state": "completed",
                "response_headers": [["content-type", "text/event-stream"]], "ttfb_us": 1000,
                **exchange,
            },
        ).scalar_one()  # fmt: skip
        conn.execute(insert(cast(Table, Event.__table__)), [
            {"exchange_id": xid, "seq": i, "offset_us": 2000 * (i + 1), "raw": r}
            for i, r in enumerate(raw)
        ])  # fmt: skip
    Cassette(path).export(store)
    store.close()


def test_https_through_the_forward_proxy(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    """An HTTPS API replayed through ``proxy_url``: mitmproxy's CA, no upstream anywhere."""
    hand_cassette(pytester.path / "feed.jsonl", [b'data: {"n": 1}\n\n', b"data: [DONE]\n\n"])
    pytester.makepyfile(
        test_feed="""
import httpx, pytest

@pytest.mark.ssetape("feed.jsonl")
def test_feed(ssetape):
    with httpx.Client(proxy=ssetape.proxy_url, verify=ssetape.ca_file) as c:
        r = c.get("https://api.example.com/v1/feed")
    assert r.status_code == 200
    assert r.content == b'data: {"n": 1}\\n\\ndata: [DONE]\\n\\n'
"""
    )
    pytester.runpytest("-W", "ignore::DeprecationWarning", *confdir_args).assert_outcomes(passed=1)


def test_a_recording_with_a_gap_fails_the_test_that_replays_it(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    """The stream stops where the recording misses events, says so in a header, and the test
    fails with the reason even though it swallowed the cut; allow_gaps serves the rest."""
    raw = [b"data: %d\n\n" % i for i in range(4)]
    why = "1234 bytes not recorded: the recording process fell behind"
    hand_cassette(pytester.path / "gap.jsonl", raw, gap_seq=2, error=why)
    pytester.makepyfile(
        test_gap="""
import httpx, pytest

def read(ssetape):
    got, header = b"", None
    try:
        url = ssetape.base_url("https://api.example.com") + "/v1/feed"
        with httpx.stream("GET", url) as r:
            header = r.headers.get("x-ssetape-incomplete")
            for chunk in r.iter_raw():
                got += chunk
    except httpx.HTTPError:
        pass  # cut at the gap: a careless test carries on
    return got, header

@pytest.mark.ssetape("gap.jsonl")
def test_careless(ssetape):
    got, header = read(ssetape)
    assert got == b"data: 0\\n\\ndata: 1\\n\\n"
    assert header == "from event #2: WHY"

@pytest.mark.ssetape("gap.jsonl", allow_gaps=True)
def test_allowed(ssetape):
    got, header = read(ssetape)
    assert got == b"data: 0\\n\\ndata: 1\\n\\ndata: 2\\n\\ndata: 3\\n\\n"
    assert header == "from event #2: WHY"

# Recording new episodes, what is on the tape still replays with its gaps allowed.
@pytest.mark.ssetape("gap.jsonl", allow_gaps=True, record_mode="new_episodes")
def test_allowed_while_recording_new_episodes(ssetape):
    got, header = read(ssetape)
    assert got == b"data: 0\\n\\ndata: 1\\n\\ndata: 2\\n\\ndata: 3\\n\\n"
    assert header == "from event #2: WHY"
""".replace("WHY", why)
    )
    result = pytester.runpytest(*confdir_args)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*1 recording(s) of cassette*gap.jsonl replayed incomplete*",
            f"*cassette line 2: from event #2: {why}",
            "*allow_gaps=True*",
        ]
    )


def test_saving_merges_or_replaces_by_mode(tmp_path: Path) -> None:
    """What each record mode does with a cassette that is already there, without proxies."""
    import datetime as dt
    from typing import cast

    from sqlalchemy import Table, insert

    from ssetape.storage.models import Exchange
    from ssetape.storage.store import Store
    from ssetape.testing.tape_session import TapeSession

    cassette = tmp_path / "c.jsonl"

    def save(uid: str, mode: str, run: str) -> list[str]:
        store = Store.open(str(tmp_path / f"{uid}.db"))
        with store.engine.begin() as conn:
            conn.execute(insert(cast(Table, Exchange.__table__)), {
                "uid": uid * 32, "started_at": dt.datetime.now(dt.UTC), "method": "GET",
                "scheme": "http", "host": "h", "port": 80, "path": "/", "http_version": "1.1",
                "request_headers": [], "fingerprint": uid,
            })  # fmt: skip
        session = TapeSession(
            cassette, confdir=tmp_path, record_mode=mode, run_id=run, lock_dir=tmp_path / "locks"
        )
        session._save(store)
        store.close()
        lines = [orjson.loads(line) for line in cassette.read_text().splitlines()[1:]]
        return [x["fingerprint"] for x in lines]

    assert save("a", "all", "run1") == ["a"]
    assert save("b", "all", "run1") == ["a", "b"]  # same run: tests sharing it add up
    assert save("c", "all", "run2") == ["c"]  # a new run re-records
    assert save("d", "new_episodes", "run3") == ["c", "d"]
    assert save("e", "once", "run4") == ["c", "d", "e"]


def test_recording_runs_the_ssetape_it_is_pointed_at(
    pytester: pytest.Pytester, confdir_args: list[str]
) -> None:
    """--ssetape-bin (or $SSETAPE_BIN): an ssetape installed apart records; replay, in the
    test process, needs none."""
    log = pytester.path / "ran.txt"
    wrapper = pytester.path / "ssetape-elsewhere"
    script = f'#!/bin/sh\necho "$@" >> {log}\nexec {sys.executable} -m ssetape.cli "$@"\n'
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    out = pytester.path / "kept.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(upstream=sim.url, out=str(out), content="hi"))
        pytester.runpytest(
            "--ssetape-record-mode=once", f"--ssetape-bin={wrapper}", "-k", "chat", *confdir_args
        ).assert_outcomes(passed=1)
    assert log.read_text().startswith("record ")
    assert (pytester.path / "cassettes" / "test_llm" / "test_chat.jsonl").exists()
    log.unlink()
    pytester.runpytest("-k", "chat", f"--ssetape-bin={wrapper}", *confdir_args).assert_outcomes(
        passed=1
    )
    assert not log.exists()  # replaying started no ssetape


def test_the_marker_names_provider_profiles(
    pytester: pytest.Pytester, confdir_args: list[str], tmp_path: Path
) -> None:
    """profiles={host: name} reaches the recording proxy and the replay's import; a name no
    profile has is the test's error, in one line."""
    from ssetape.cassettes.cassette import Cassette
    from ssetape.storage.store import Store

    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(
            test_profiles=f"""
import openai, pytest

UPSTREAM = {sim.url!r}

def ask(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k", max_retries=0)
    return list(client.responses.create(model="sim-resp", input="hi", stream=True))

@pytest.mark.ssetape("seed.jsonl", profiles={{"127.0.0.1": "seed"}})
def test_seed(ssetape):
    assert ask(ssetape)[-1].type == "response.completed"

@pytest.mark.ssetape("typo.jsonl", profiles={{"127.0.0.1": "sead"}})
def test_typo(ssetape):
    pass
"""
        )
        result = pytester.runpytest("--ssetape-record-mode=once", *confdir_args)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*profiles=...*unknown profile 'sead'*"])
    cassette = pytester.path / "seed.jsonl"
    for profiles, want in (({"127.0.0.1": "seed"}, "seed"), (None, "compatible")):
        store = Store.open(str(tmp_path / f"{want}.db"))
        Cassette(cassette).import_into(store, profiles=profiles)
        (x,) = Queries(store).exchanges()
        assert (x.profile, x.outcome) == (want, "completed")
        store.close()
    result = pytester.runpytest("-k", "seed", *confdir_args)  # replayed offline
    result.assert_outcomes(passed=1)
