"""Every real provider stream of tests/data/real_streams through `ssetape record` from an
upstream that serves it as its provider did, then through `ssetape replay`: the same bytes both
ways, and the stream knowledge stored is what the provider documents. Twice: in reverse mode
from 127.0.0.1, a host no profile names (the default profile), and in forward mode with each
stream's upstream named for the profile of the host it came from (`--profile 127.0.0.1:PORT=`)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from ssetape.analysis.apis import APIS
from ssetape.analysis.knowledge import Knowledge
from ssetape.analysis.profiles import DEFAULT_PROFILE
from ssetape.cost.price_book import PriceBook, PriceQuery
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc
from tests.corpus import PICK, RealStream, corpus_upstream, real_streams
from tests.ssetape.analysis.test_real_streams import EXPECTED


def _send(client: httpx.Client, base: str, stream: RealStream) -> tuple[int, bytes]:
    """The stream's request, as its client sent it; the body's bytes as they came (encoded)."""
    with client.stream(
        stream.meta["request_method"],
        base + stream.meta["request_path"],
        content=stream.request_body or None,
        headers={PICK: stream.name, "content-type": "application/json"},
    ) as r:
        return r.status_code, b"".join(r.iter_raw())


def _picked(headers: list[list[str]] | None) -> str:
    return next(v for k, v in headers or [] if k.lower() == PICK)


def _through_reverse(
    proc: Callable[..., Proc], streams: list[RealStream]
) -> tuple[str, dict[str, str]]:
    """Recorded and replayed from one upstream at 127.0.0.1: every stream under the default."""
    with corpus_upstream() as upstream, httpx.Client(timeout=60) as client:
        rec = proc("record", "--mode", f"reverse:{upstream}")
        for stream in streams:
            assert _send(client, rec.url, stream) == (200, stream.wire), stream.name
        assert rec.stop() == 0
        replay = proc("replay", "--speed", "0", "--mode", f"reverse:{upstream}", db=rec.db)
        for stream in streams:
            status, got = _send(client, replay.url, stream)
            assert (status, got) == (200, stream.wire), stream.name
    return rec.db, {s.name: DEFAULT_PROFILE for s in streams}


def _through_forward(
    proc: Callable[..., Proc], streams: list[RealStream]
) -> tuple[str, dict[str, str]]:
    """Recorded and replayed through the forward proxy, one upstream per profile, each named
    for the profile of the host its streams came from."""
    profile = {s.name: row[1] for s in streams for row in EXPECTED if row[0] == s.name}
    with contextlib.ExitStack() as stack:
        upstreams = {
            p: stack.enter_context(corpus_upstream()) for p in sorted(set(profile.values()))
        }
        named = [f"{url.removeprefix('http://')}={p}" for p, url in upstreams.items()]
        rec = proc("record", *(a for n in named for a in ("--profile", n)))
        with httpx.Client(timeout=60, proxy=rec.url) as client:
            for stream in streams:
                got = _send(client, upstreams[profile[stream.name]], stream)
                assert got == (200, stream.wire), stream.name
        assert rec.stop() == 0
        replay = proc("replay", "--speed", "0", db=rec.db)  # the direct server: forward mode
        with httpx.Client(timeout=60, proxy=replay.url) as client:
            for stream in streams:
                got = _send(client, upstreams[profile[stream.name]], stream)
                assert got == (200, stream.wire), stream.name
    return rec.db, profile


@pytest.mark.parametrize("under", ["default", "host"])
def test_real_streams_record_and_replay_byte_for_byte_with_their_knowledge(
    ssetape_proc: Callable[..., Proc], under: str
) -> None:
    streams = real_streams()
    through = _through_reverse if under == "default" else _through_forward
    db, profiles = through(ssetape_proc, streams)
    assert set(profiles.values()) != {DEFAULT_PROFILE} or under == "default"
    store = Store.open(db, create=False)
    book = PriceBook.bundled()
    try:
        exchanges = {_picked(x.request_headers): x for x in Queries(store).exchanges()}
        expected = {row[0]: row[1:] for row in EXPECTED}
        for stream in streams:
            x = exchanges[stream.name]
            (
                _,
                api,
                model,
                outcome,
                reason,
                inp,
                out,
                cread,
                cwrite,
                rtok,
                first,
                text,
                rsn,
                tools,
            ) = expected[stream.name]
            assert x.profile == profiles[stream.name], stream.name
            got = (x.api, x.model, x.outcome, x.outcome_reason, x.input_tokens, x.output_tokens)
            assert got == (api, model, outcome, reason, inp, out), stream.name
            counts = (x.cache_read_tokens, x.cache_write_tokens, x.reasoning_tokens)
            assert counts == (cread, cwrite, rtok), stream.name
            details = x.details or {}
            assert (len(x.output_text or ""), len(details.get("reasoning_text") or "")) == (
                text,
                rsn,
            )
            assert len(details.get("tool_calls") or []) == tools, stream.name
            assert Knowledge(store).findings(x.id) == [], stream.name
            # TTFT is when the first content event arrived, as the proxy stamped it.
            events = list(Queries(store).events(x.id)) if first is not None else []
            firsts = [e.offset_us for e in events if e.seq == first]
            assert x.ttft_us == (firsts[0] if firsts else None), stream.name
            # Priced in the recording process as the provider's own figures say (see
            # tests/ssetape/cost): served from 127.0.0.1, at the profile's or maker's rates.
            rules = APIS.get(x.api or "")
            q = PriceQuery(
                x.api, x.model, x.scheme, x.host, x.port, x.started_at, x.profile,
                x.input_tokens, x.output_tokens, x.cache_read_tokens, x.cache_write_tokens,
                x.reasoning_tokens, details.get("web_searches"),
                vendor=rules.vendor if rules else None,
                input_excludes_cache=bool(rules and rules.input_excludes_cache),
            )  # fmt: skip
            assert x.cost_nusd == book.price(q).nusd, stream.name
            assert x.price_data == book.version and (x.cost_nusd is not None or x.price_note)
        assert sum(x.cost_nusd is not None for x in exchanges.values()) >= 30
    finally:
        store.close()


def test_a_host_named_for_the_seed_gateway_is_read_under_its_profile(
    ssetape_proc: Callable[..., Proc],
) -> None:
    """`--profile HOST=seed` points a gateway at the seed documents' rules: OpenAI's own
    reasoning summaries are then what that gateway says never arrives, and `show` says so."""
    stream = next(s for s in real_streams() if s.name == "resp_background_queued")
    with corpus_upstream() as upstream, httpx.Client(timeout=60) as client:
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}", "--profile", "127.0.0.1=seed")
        assert _send(client, rec.url, stream) == (200, stream.wire)
        assert rec.stop() == 0
    shown = subprocess.run(
        [SSETAPE, "show", "--db", rec.db, "1", "--json"], capture_output=True, check=True
    )
    doc = orjson.loads(shown.stdout)
    assert doc["profile"] == "seed"
    assert [f["code"] for f in doc["findings"]] == ["never_arrives"]
    # Re-read as what it is, OpenAI's own stream: the finding goes, the profile is stored.
    subprocess.run(
        [SSETAPE, "reindex", "--db", rec.db, "--profile", "127.0.0.1=openai"], check=True
    )
    doc = orjson.loads(
        subprocess.run(
            [SSETAPE, "show", "--db", rec.db, "1", "--json"], capture_output=True, check=True
        ).stdout
    )
    assert (doc["profile"], doc["findings"]) == ("openai", [])


def test_a_bad_profile_is_a_one_line_error(tmp_path: Path) -> None:
    for value in ("nohost", "api.x.com=nosuch"):
        r = subprocess.run(
            [SSETAPE, "record", "--db", str(tmp_path / "t.db"), "--profile", value],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2 and "--profile" in r.stderr and "Traceback" not in r.stderr
